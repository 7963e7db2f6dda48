module github.com/idemgo/idem/cmd/idem

go 1.26

require github.com/idemgo/idem v0.0.0

replace github.com/idemgo/idem => ../..
