module github.com/idemgo/idem/integration

go 1.26

require github.com/idemgo/idem v0.0.0

require github.com/anishathalye/porcupine v1.3.1

replace github.com/idemgo/idem => ../
