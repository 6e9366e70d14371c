package tundev

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/fednet/fednet/internal/offload"
)

// fakeKernel accepts the offload bits in accept and refuses others with
// EINVAL, as a kernel without them does; it records the header length.
type fakeKernel struct {
	accept int
	hdrLen int
	err    error // returned instead of EINVAL, if set
}

func (k *fakeKernel) setHdrLen(n int) error { k.hdrLen = n; return nil }
func (k *fakeKernel) setOffload(f int) error {
	if f&^k.accept != 0 {
		if k.err != nil {
			return k.err
		}
		return unix.EINVAL
	}
	return nil
}

func TestNegotiate(t *testing.T) {
	all := tunFCsum | tunFTSO4 | tunFTSO6 | tunFTSOECN | tunFUSO4 | tunFUSO6 | tunFUDPTunnel | tunFUDPTunnelCsm
	for _, tc := range []struct {
		name    string
		mode    Mode
		accept  int
		want    offload.Offloads
		hdrLen  int
		wantErr bool
	}{
		{"6.17+ kernel", All, all, offload.Offloads{TCP: true, UDP: true, Tunnel: true}, offload.TunnelHeaderLen, false},
		{"kernel without UDP-tunnel GSO", All, all &^ (tunFUDPTunnel | tunFUDPTunnelCsm), offload.Offloads{TCP: true, UDP: true}, offload.HeaderLen, false},
		{"kernel without USO", All, tunFCsum | tunFTSO4 | tunFTSO6 | tunFTSOECN, offload.Offloads{TCP: true}, offload.HeaderLen, false},
		{"kernel without TSO ECN", All, tunFCsum | tunFTSO4 | tunFTSO6, offload.Offloads{TCP: true}, offload.HeaderLen, false},
		{"kernel without offloads", All, 0, offload.Offloads{}, offload.HeaderLen, false},
		{"no-tunnel mode", NoTunnel, all, offload.Offloads{TCP: true, UDP: true}, offload.HeaderLen, false},
		{"none mode", None, all, offload.Offloads{}, offload.HeaderLen, false},
	} {
		k := &fakeKernel{accept: tc.accept}
		s, err := negotiate(tc.mode, k.setHdrLen, k.setOffload)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if s.off != tc.want || k.hdrLen != tc.hdrLen || s.hdrLen != tc.hdrLen {
			t.Errorf("%s: offloads %+v with header length %d (set %d), want %+v with %d", tc.name, s.off, s.hdrLen, k.hdrLen, tc.want, tc.hdrLen)
		}
	}
	k := &fakeKernel{accept: 0, err: unix.EPERM}
	if _, err := negotiate(All, k.setHdrLen, k.setOffload); !errors.Is(err, unix.EPERM) {
		t.Errorf("EPERM from the kernel: negotiate = %v, want it returned", err)
	}
}
