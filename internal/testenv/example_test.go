package testenv_test

import (
	"fmt"

	"github.com/idemgo/idem/internal/testenv"
)

func ExampleServer_Addr() {
	// No test sets this variable: Addr falls back to the default.
	nats := testenv.Server{Name: "NATS", Env: "IDEM_EXAMPLE_NATS_URL", Default: "nats://127.0.0.1:4222"}
	fmt.Println(nats.Addr())
	// Output: nats://127.0.0.1:4222
}
