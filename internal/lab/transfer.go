package lab

import (
	"context"
	"fmt"
	"math"
	"net/netip"
	"strconv"
	"time"
)

// TransferConfig says how StartTransfer runs.
type TransferConfig struct {
	// Duration of the transfer, rounded up to whole seconds (at least 1).
	Duration time.Duration
	// Rate caps the sender in bit/s with the kernel's TCP pacing (iperf3
	// --fq-rate), 0 for no cap. Unlike iperf3 -b, which keeps an average,
	// a sender held up by an outage does not burst to catch up afterwards.
	Rate float64
	// Interval is the receiver's reporting interval (default 500 ms, at
	// least 100 ms).
	Interval time.Duration
}

// TransferInterval is one periodic report of the receiver: the bytes that
// arrived in [Start, End), counted from the transfer's start.
type TransferInterval struct {
	Start, End time.Duration
	Bytes      int64
}

// TransferResult is what an iperf3 TCP transfer moved.
type TransferResult struct {
	// Bytes the receiver got.
	Bytes int64
	// Retransmits counts the sender's TCP retransmissions.
	Retransmits int
	// Intervals are the receiver's periodic reports, in order.
	Intervals []TransferInterval
}

// BytesAfter returns the bytes received in the intervals that start at or
// after t (from the transfer's start).
func (r TransferResult) BytesAfter(t time.Duration) int64 {
	var n int64
	for _, iv := range r.Intervals {
		if iv.Start >= t {
			n += iv.Bytes
		}
	}
	return n
}

// Transfer is an iperf3 TCP transfer over one connection, started by
// StartTransfer.
type Transfer struct {
	// Start is when the client was started: interval times count from
	// about then (connection setup in a lab takes milliseconds).
	Start time.Time
	done  chan struct{}
	res   TransferResult
	err   error
}

// StartTransfer starts a one-shot iperf3 server in server, waits until it
// listens, and starts a client in client that sends to address to (an
// address of server) over one TCP connection for cfg.Duration. It returns
// at once; Wait gives the result. Both processes are bounded by ctx and by
// the duration plus 30 s.
func StartTransfer(ctx context.Context, client, server *Node, to netip.Addr, cfg TransferConfig) (*Transfer, error) {
	secs := max(1, int(math.Ceil(cfg.Duration.Seconds())))
	iv := cfg.Interval
	if iv == 0 {
		iv = 500 * time.Millisecond
	}
	if iv < 100*time.Millisecond {
		return nil, fmt.Errorf("transfer: interval %v; use at least 100ms", iv)
	}
	if cfg.Rate < 0 || cfg.Rate > maxRate {
		return nil, fmt.Errorf("transfer: rate %g bit/s; use 0 (no cap) to %g", cfg.Rate, float64(maxRate))
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(secs)*time.Second+30*time.Second)
	port, family, stopServer, err := startIperf3Server(ctx, server, to, secs)
	if err != nil {
		cancel()
		return nil, err
	}
	args := []string{"-c", to.String(), family, "-p", port, "-t", strconv.Itoa(secs), "-P", "1", "-J",
		"--get-server-output", "-i", strconv.FormatFloat(iv.Seconds(), 'f', -1, 64), "--connect-timeout", "3000"}
	if cfg.Rate > 0 {
		args = append(args, "--fq-rate", strconv.FormatFloat(cfg.Rate, 'f', 0, 64))
	}
	t := &Transfer{Start: time.Now(), done: make(chan struct{})}
	go func() {
		defer close(t.done)
		defer cancel()
		defer stopServer()
		r, err := runIperf3Client(ctx, client, to, args...)
		if err != nil {
			t.err = err
			return
		}
		t.res = transferResult(r)
	}()
	return t, nil
}

// Wait waits for the transfer to end and returns what the receiver got.
// An error means the transfer failed: it could not connect, or the
// connection broke (iperf3's message says how).
func (t *Transfer) Wait() (TransferResult, error) {
	<-t.done
	return t.res, t.err
}

// transferResult reads the receiver's intervals from a client report run
// with --get-server-output (the client's own when the server's is
// missing).
func transferResult(r iperfReport) TransferResult {
	recv := r
	if r.ServerOutput != nil && len(r.ServerOutput.Intervals) > 0 {
		recv = *r.ServerOutput
	}
	res := TransferResult{Bytes: r.End.SumReceived.Bytes, Retransmits: r.End.SumSent.Retransmits}
	for _, iv := range recv.Intervals {
		res.Intervals = append(res.Intervals, TransferInterval{
			Start: seconds(iv.Sum.Start),
			End:   seconds(iv.Sum.End),
			Bytes: iv.Sum.Bytes,
		})
	}
	return res
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
