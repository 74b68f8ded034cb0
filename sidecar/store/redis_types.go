package store

import (
	"errors"
	"net"

	"github.com/redis/go-redis/v9"
)

type (
	redisSubscription = redis.Subscription
	redisMessage      = redis.Message
)

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
