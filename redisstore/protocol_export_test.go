package redisstore

// Exports of the Lua protocol for the black-box tests.

// LuaPrelude is the declarations every script starts with.
func LuaPrelude() string { return luaPrelude() }

// LuaConstantNames are the names the prelude declares.
func LuaConstantNames() []string {
	names := make([]string, len(luaConstants))
	for i, c := range luaConstants {
		names[i] = c.name
	}
	return names
}

// ScriptBodies are the scripts' sources after their prelude.
func ScriptBodies() map[string]string {
	bodies := map[string]string{}
	for name, sc := range map[string]*script{
		"claim": claimScript, "claimBatch": claimBatchScript, "outcome": outcomeScript,
		"release": releaseScript, "extend": extendScript, "get": getScript, "deleteIf": deleteIfScript,
		"peek": peekScript, "peekBatch": peekBatchScript,
	} {
		bodies[name] = sc.body
	}
	return bodies
}

// ScriptSources are the scripts' sources as Redis runs them.
func ScriptSources() map[string]string {
	srcs := map[string]string{}
	for name, sc := range map[string]*script{
		"claim": claimScript, "claimBatch": claimBatchScript, "outcome": outcomeScript,
		"release": releaseScript, "extend": extendScript, "get": getScript, "deleteIf": deleteIfScript,
		"peek": peekScript, "peekBatch": peekBatchScript,
	} {
		srcs[name] = sc.src
	}
	return srcs
}
