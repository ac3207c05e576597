package inventory

import (
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/order"
)

// IsPermanent reports whether err is about broken data that no retry can mend: ErrCorrupt, order.ErrInvalid,
// or a Redis error reply about the data. Anything else, known or not, is transient, so that an
// infrastructure fault never gives up on a valid order.
func IsPermanent(err error) bool {
	if err == nil { // the usual case, without errors.As's allocation
		return false
	}
	if errors.Is(err, ErrCorrupt) || errors.Is(err, order.ErrInvalid) {
		return true
	}
	var reply redis.Error
	return errors.As(err, &reply) && !errors.Is(err, redis.Nil) && brokenData(reply.Error())
}

// brokenData tells the Redis error replies about the data: WRONGTYPE (a SKU key holds another type), and
// "ERR user_script:" (a script failed at run time on the data it found: a corrupt outcome record, say). A
// command refused inside a script keeps its own code (OOM, READONLY, NOREPLICAS ... "script: <sha>, on
// @user_script:1."): those stay transient.
func brokenData(reply string) bool {
	return strings.HasPrefix(reply, "WRONGTYPE") || strings.HasPrefix(reply, "ERR user_script:")
}
