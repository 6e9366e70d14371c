//go:build linux

package lab

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"
)

// TestFaults injects every fault primitive on a lab of examples/ha.yaml
// (no agents: the checks ping the lab's own addresses) and undoes it: each
// cuts exactly what it says, and undoing it restores that.
func TestFaults(t *testing.T) {
	needRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg := haConfig(t, testName("f"))
	cfg.HostsPerSite = 1
	l, err := Up(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Down(context.Background()); err != nil {
			t.Error(err)
		}
	})
	aws, azure, gw1, gw2 := l.Gateway("aws-gw"), l.Gateway("azure-gw"), l.Gateway("onprem-gw1"), l.Gateway("onprem-gw2")
	host := l.Hosts("lab")[0]
	reaches := func(t *testing.T, from *Node, to netip.Addr) bool {
		t.Helper()
		r, err := Ping(ctx, from, to, 2, 20*time.Millisecond)
		if err != nil {
			return false // e.g. "Network is unreachable" without a carrier
		}
		return r.Received > 0
	}
	// expect checks that from reaches to, or does not. Reaching may take
	// a few seconds after a repair: a host whose ARP request went
	// unanswered during a cut asks again only on its next retransmission.
	expect := func(t *testing.T, from *Node, to netip.Addr, want bool) {
		t.Helper()
		got := reaches(t, from, to)
		for deadline := time.Now().Add(5 * time.Second); want && !got && time.Now().Before(deadline); {
			got = reaches(t, from, to)
		}
		if got != want {
			t.Errorf("%s -> %s: reached %v, want %v", from, to, got, want)
		}
	}
	must := func(t *testing.T, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}

	t.Run("Block", func(t *testing.T) {
		must(t, l.Block(ctx, aws, azure, true))
		must(t, l.Block(ctx, aws, azure, true)) // idempotent
		expect(t, aws, azure.Public.Addr(), false)
		expect(t, azure, aws.Public.Addr(), false) // the answers are blocked
		expect(t, aws, gw1.Public.Addr(), true)
		expect(t, azure, gw1.Public.Addr(), true)
		must(t, l.Block(ctx, aws, azure, false))
		expect(t, aws, azure.Public.Addr(), true)
		must(t, l.Block(ctx, aws, azure, false)) // idempotent
	})

	t.Run("SetUplink", func(t *testing.T) {
		must(t, l.SetUplink(ctx, gw1, false))
		expect(t, aws, gw1.Public.Addr(), false)
		expect(t, aws, gw2.Public.Addr(), true)
		expect(t, host, gw1.LAN.Addr(), true)
		must(t, l.SetUplink(ctx, gw1, true))
		expect(t, aws, gw1.Public.Addr(), true)
	})

	t.Run("SetCables", func(t *testing.T) {
		must(t, l.SetCables(ctx, gw1, false))
		expect(t, aws, gw1.Public.Addr(), false)
		expect(t, host, gw1.LAN.Addr(), false)
		expect(t, host, gw2.LAN.Addr(), true)
		must(t, l.SetCables(ctx, gw1, true))
		expect(t, aws, gw1.Public.Addr(), true)
		expect(t, host, gw1.LAN.Addr(), true)
	})

	t.Run("Separate", func(t *testing.T) {
		must(t, l.Separate(ctx, gw1, gw2, true))
		expect(t, gw1, gw2.LAN.Addr(), false)
		expect(t, host, gw1.LAN.Addr(), true)
		expect(t, host, gw2.LAN.Addr(), true)
		must(t, l.Separate(ctx, gw1, gw2, false))
		expect(t, gw1, gw2.LAN.Addr(), true)
		if err := l.Separate(ctx, aws, azure, true); err == nil {
			t.Error("separating two gateways of different sites worked; they share no switch")
		}
	})

	t.Run("VirtualAddress", func(t *testing.T) {
		vip := netip.MustParseAddr("10.5.0.254")
		if h, err := l.VirtualAddressHolders(ctx, "lab"); err != nil || len(h) != 0 {
			t.Fatalf("holders before: %v, %v; want none", h, err)
		}
		expect(t, host, vip, false)
		must(t, l.HoldVirtualAddress(ctx, gw1))
		must(t, l.HoldVirtualAddress(ctx, gw1)) // idempotent
		if h, err := l.VirtualAddressHolders(ctx, "lab"); err != nil || !slices.Equal(h, []*Node{gw1}) {
			t.Errorf("holders: %v, %v; want onprem-gw1", h, err)
		}
		expect(t, host, vip, true)
		if err := l.HoldVirtualAddress(ctx, l.Node("internet")); err == nil {
			t.Error("the internet held a virtual address")
		}
	})

	t.Run("KillAll", func(t *testing.T) {
		p, err := l.Start(gw2, "sleep", "60")
		must(t, err)
		// The gateway wrapper execs sleep after mounting /run/wireguard.
		var procs []ProcessInfo
		for deadline := time.Now().Add(5 * time.Second); ; {
			procs, err = gw2.Processes()
			must(t, err)
			if len(procs) == 1 && procs[0].PID == p.PID && procs[0].Command == "sleep 60" && procs[0].CommandMatches("60") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("processes of %s: %v; want sleep 60 as %d", gw2, procs, p.PID)
			}
			time.Sleep(10 * time.Millisecond)
		}
		killed, err := gw2.KillAll(ctx)
		must(t, err)
		if len(killed) != 1 || killed[0].PID != p.PID {
			t.Errorf("killed %v, want only %d", killed, p.PID)
		}
		select {
		case <-p.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("the killed process is not done")
		}
		if procs, _ := gw2.Processes(); len(procs) != 0 {
			t.Errorf("processes left: %v", procs)
		}
	})

	t.Run("Prober", func(t *testing.T) {
		targets := []ProbeTarget{{From: host, To: gw1.LAN.Addr()}, {From: host, To: gw2.LAN.Addr()}}
		p, err := StartProber(targets, 10*time.Millisecond)
		must(t, err)
		defer p.Stop()
		deadline := time.Now().Add(10 * time.Second)
		for !p.Answering(p.Start(), 100*time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the prober saw no answers")
			}
			time.Sleep(20 * time.Millisecond)
		}
		cut := time.Now()
		must(t, l.SetCables(ctx, gw1, false))
		for waited := 0; waited < 500 && time.Since(cut) < 300*time.Millisecond; waited++ {
			time.Sleep(10 * time.Millisecond)
		}
		must(t, l.SetCables(ctx, gw1, true))
		restored := time.Now()
		for !p.Answering(restored, 200*time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the prober saw no recovery")
			}
			time.Sleep(20 * time.Millisecond)
		}
		logs := p.Stop()
		if len(logs) != 2 {
			t.Fatalf("%d logs, want 2", len(logs))
		}
		cutLog, other := logs[0], logs[1]
		if cutLog.Lost() == 0 || cutLog.Outage() <= 0 || cutLog.Lost() >= len(cutLog.Probes) {
			t.Errorf("%s with its cables out for 300 ms: %d of %d lost, outage %v; want some, not all", cutLog.Target, cutLog.Lost(), len(cutLog.Probes), cutLog.Outage())
		}
		if _, ok := cutLog.AnsweringFrom(restored.Sub(p.Start())); !ok {
			t.Errorf("%s does not answer at the end", cutLog.Target)
		}
		if other.Lost() != 0 || other.Outage() != 0 || len(other.Probes) < 10 {
			t.Errorf("%s (not cut): %d of %d lost, outage %v; want none lost", other.Target, other.Lost(), len(other.Probes), other.Outage())
		}
	})

	t.Run("Transfer", func(t *testing.T) {
		tr, err := StartTransfer(ctx, aws, azure, azure.Public.Addr(), TransferConfig{Duration: 2 * time.Second, Rate: 10e6, Interval: 250 * time.Millisecond})
		must(t, err)
		r, err := tr.Wait()
		must(t, err)
		if r.Bytes <= 0 || len(r.Intervals) < 4 || r.BytesAfter(time.Second) <= 0 || r.BytesAfter(time.Second) >= r.Bytes {
			t.Errorf("transfer: %d bytes, %d intervals, %d after 1 s; want bytes in every part", r.Bytes, len(r.Intervals), r.BytesAfter(time.Second))
		}
	})
}
