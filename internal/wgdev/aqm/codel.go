package aqm

import (
	"math"
	"time"
)

// codel is the CoDel controller of RFC 8289 for one queue: it looks at the
// sojourn time of each packet leaving the queue and says when to drop
// one. Not safe for concurrent use.
type codel struct {
	target, interval int64 // nanoseconds

	firstAbove int64 // when the sojourn time will have been above target for an interval; 0: it is below
	dropping   bool
	dropNext   int64 // when to drop next, in the dropping state
	count      int   // drops in this dropping state
	lastCount  int   // count when the last dropping state ended
	// owed: a drop is due but the packets since were too small to drop
	// (pings, ACKs): the next large one goes instead.
	owed bool
}

func newCodel(target, interval time.Duration) codel {
	return codel{target: int64(target), interval: int64(interval)}
}

// dequeue is called for each packet leaving the queue at time now (ns)
// after sojourn ns in it; large says whether it may be dropped. It
// reports whether to drop it.
func (c *codel) dequeue(now, sojourn int64, large bool) bool {
	drop := c.decide(now, sojourn)
	if !large {
		c.owed = c.owed || drop
		return false
	}
	if drop || c.owed && c.dropping {
		c.owed = false
		return true
	}
	c.owed = false
	return false
}

// decide runs the control law of RFC 8289 (section 5) for one packet.
func (c *codel) decide(now, sojourn int64) bool {
	okToDrop := false
	switch {
	case sojourn < c.target:
		c.firstAbove = 0
	case c.firstAbove == 0:
		c.firstAbove = now + c.interval
	case now >= c.firstAbove:
		okToDrop = true
	}
	if c.dropping {
		if !okToDrop {
			c.dropping = false
			return false
		}
		if now >= c.dropNext {
			c.count++
			c.dropNext = c.controlLaw(c.dropNext)
			return true
		}
		return false
	}
	if !okToDrop {
		return false
	}
	c.dropping = true
	// Start where the last dropping state left off if it ended recently:
	// the queue has not drained since.
	delta := c.count - c.lastCount
	c.count = 1
	if delta > 1 && now-c.dropNext < 16*c.interval {
		c.count = delta
	}
	c.dropNext = c.controlLaw(now)
	c.lastCount = c.count
	return true
}

// controlLaw returns when to drop next after a drop at t: the interval
// shrinks with the square root of the drops so far.
func (c *codel) controlLaw(t int64) int64 {
	return t + int64(float64(c.interval)/math.Sqrt(float64(c.count)))
}
