package rxstamp

import (
	"net"
	"runtime"
	"testing"
	"time"
)

// TestTime: a datagram received on a socket with time stamps enabled
// carries one, between the send and the read (Linux); none is found in
// control messages without it.
func TestTime(t *testing.T) {
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Skipf("no loopback UDP here: %v", err)
	}
	defer c.Close()
	if err := Enable(c); err != nil {
		t.Fatal(err)
	}
	s, err := net.DialUDP("udp4", nil, c.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	before := time.Now()
	if _, err := s.Write([]byte("stamp me")); err != nil {
		t.Fatal(err)
	}
	buf, oob := make([]byte, 64), make([]byte, OOBSize)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, oobn, _, _, err := c.ReadMsgUDP(buf, oob)
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	at, ok := Time(oob[:oobn])
	if runtime.GOOS != "linux" {
		if ok {
			t.Errorf("a time stamp %v where there are none", at)
		}
		return
	}
	// The kernel's clock against ours: allow a millisecond either way.
	if !ok || at.Before(before.Add(-time.Millisecond)) || at.After(after.Add(time.Millisecond)) {
		t.Errorf("time stamp %v, %v; want one between %v and %v", at, ok, before, after)
	}
	if _, ok := Time(nil); ok {
		t.Error("a time stamp in no control messages")
	}
}
