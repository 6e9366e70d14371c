package wireguard

import (
	"fmt"
	"sync"
	"time"
)

// RestartPolicy bounds how often the driver restarts a userspace device
// process that died: the first Burst restarts within Window happen at
// once; each further one waits Delay, doubling up to MaxDelay. A process
// that ran for Window without dying starts the count afresh.
type RestartPolicy struct {
	Burst    int
	Window   time.Duration
	Delay    time.Duration
	MaxDelay time.Duration
}

// DefaultRestartPolicy restarts three times at once within a minute, then
// waits 1 s, 2 s, 4 s ... up to 30 s between restarts.
var DefaultRestartPolicy = RestartPolicy{Burst: 3, Window: time.Minute, Delay: time.Second, MaxDelay: 30 * time.Second}

// validate reports the first field out of range.
func (p RestartPolicy) validate() error {
	switch {
	case p.Burst < 1:
		return fmt.Errorf("wireguard: Config.Restart.Burst %d: allow at least 1 immediate restart", p.Burst)
	case p.Window <= 0 || p.Delay <= 0 || p.MaxDelay < p.Delay:
		return fmt.Errorf("wireguard: Config.Restart: Window %v, Delay %v and MaxDelay %v must be positive, with MaxDelay at least Delay",
			p.Window, p.Delay, p.MaxDelay)
	}
	return nil
}

// restarts is the restart history of one device. Not safe for concurrent
// use: its owner's lock guards it.
type restarts struct {
	policy RestartPolicy
	// at are the times of the restarts within the policy's window before
	// the latest, oldest first.
	at []time.Time
}

// next records a death at now and returns how long to wait before the
// restart it calls for (0: at once) and how many restarts the window then
// holds, this one included.
func (r *restarts) next(now time.Time) (time.Duration, int) {
	keep := r.at[:0]
	for _, t := range r.at {
		if now.Sub(t) < r.policy.Window {
			keep = append(keep, t)
		}
	}
	r.at = keep
	var delay time.Duration
	if over := len(r.at) - r.policy.Burst; over >= 0 {
		delay = r.policy.Delay
		for i := 0; i < over && delay < r.policy.MaxDelay; i++ {
			delay *= 2
		}
		delay = min(delay, r.policy.MaxDelay)
	}
	r.at = append(r.at, now.Add(delay))
	return delay, len(r.at)
}

// watch is one supervised userspace device (supervise_linux.go).
type watch struct {
	name string

	// mu is held while the device's process is checked or replaced; it
	// guards the fields below.
	mu sync.Mutex
	// pid is the process serving the device, 0 while none does.
	pid int
	// ifindex is the TUN interface the process serves: a death that took
	// the interface along is not the driver's to repair.
	ifindex int
	// retired is set when the driver deletes the interface itself: the
	// process's exit is expected.
	retired bool
	// retryAt is when a delayed restart is due, zero when none is pending.
	retryAt time.Time
	history restarts
}
