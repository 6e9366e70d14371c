package wireguard

import (
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// TestKickAgain: the handshake datagram goes again to a new peer after
// each pause while it has had no handshake, to each of its addresses,
// never to a peer that is not new or has had one; the repeats stop once
// every new peer has had a handshake, and when the device cannot be read.
func TestKickAgain(t *testing.T) {
	newPeer, other := wgtypes.Key{1}, wgtypes.Key{2}
	a1, a2 := netip.MustParseAddr("100.64.0.2"), netip.MustParseAddr("fd00::2")
	kicks := map[wgtypes.Key][]netip.Addr{newPeer: {a1, a2}}
	waits := make([]time.Duration, 5)

	rounds := 0
	var sent []netip.Addr
	kickAgain(kicks, waits, func() ([]wgtypes.Peer, error) {
		rounds++
		p := wgtypes.Peer{PublicKey: newPeer}
		if rounds > 2 { // the third read sees the handshake
			p.LastHandshakeTime = time.Now()
		}
		return []wgtypes.Peer{p, {PublicKey: other}}, nil
	}, func(a netip.Addr) { sent = append(sent, a) })
	if want := []netip.Addr{a1, a2, a1, a2}; rounds != 3 || !slices.Equal(sent, want) {
		t.Errorf("%d reads, sent %v; want 3 reads and %v (two rounds before the handshake)", rounds, sent, want)
	}

	rounds, sent = 0, nil
	kickAgain(kicks, waits, func() ([]wgtypes.Peer, error) {
		rounds++
		return []wgtypes.Peer{{PublicKey: newPeer}}, nil
	}, func(a netip.Addr) { sent = append(sent, a) })
	if rounds != len(waits) || len(sent) != 2*len(waits) {
		t.Errorf("a peer that never shakes hands: %d reads, %d datagrams; want %d and %d", rounds, len(sent), len(waits), 2*len(waits))
	}

	rounds, sent = 0, nil
	kickAgain(kicks, waits, func() ([]wgtypes.Peer, error) {
		rounds++
		return nil, errors.New("no such device")
	}, func(a netip.Addr) { sent = append(sent, a) })
	if rounds != 1 || len(sent) != 0 {
		t.Errorf("a device that cannot be read: %d reads, %d datagrams; want 1 and none", rounds, len(sent))
	}
}
