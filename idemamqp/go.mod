module github.com/idemgo/idem/idemamqp

go 1.26.0

require (
	github.com/idemgo/idem v0.1.0
	github.com/rabbitmq/amqp091-go v1.16.0
	go.uber.org/goleak v1.3.0
)
