module github.com/idemgo/idem/idemamqp

go 1.26.0

require (
	github.com/idemgo/idem v0.0.0
	github.com/rabbitmq/amqp091-go v1.16.0
	go.uber.org/goleak v1.3.0
)

replace github.com/idemgo/idem => ../
