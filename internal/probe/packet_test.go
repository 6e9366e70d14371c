package probe

import (
	"bytes"
	"encoding/hex"
	"errors"
	"testing"
)

func TestEncodeDecode(t *testing.T) {
	tests := []struct {
		name string
		p    Packet
	}{
		{"request", Packet{Type: Request, Session: 0x0102030405060708, Seq: 7, SendTime: 1_700_000_000_123_456_789}},
		{"reply", Packet{Type: Reply, Session: 1, Seq: 1<<32 - 1, SendTime: 5, RecvTime: -3, ReplyTime: 9}},
		{"zero request", Packet{Type: Request}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := tt.p.Encode(nil)
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			if len(b) != Size {
				t.Fatalf("len = %d, want %d", len(b), Size)
			}
			got, err := Decode(b)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if got != tt.p {
				t.Errorf("round trip = %+v, want %+v", got, tt.p)
			}
		})
	}
}

// TestWireLayout pins the byte offsets documented in docs/probe.md.
func TestWireLayout(t *testing.T) {
	p := Packet{Type: Reply, Session: 0x1112131415161718, Seq: 0x21222324,
		SendTime: 0x3132333435363738, RecvTime: 0x4142434445464748, ReplyTime: 0x5152535455565758}
	b, err := p.Encode([]byte{0xee})
	if err != nil {
		t.Fatal(err)
	}
	want := "ee" + "464e5052" + "01" + "02" + "0000" + "1112131415161718" + "21222324" + "00000000" +
		"3132333435363738" + "4142434445464748" + "5152535455565758"
	if got := hex.EncodeToString(b); got != want {
		t.Errorf("wire =\n%s\nwant\n%s", got, want)
	}
}

func TestDecodeRejects(t *testing.T) {
	good, _ := Packet{Type: Request, Session: 9, Seq: 1, SendTime: 2}.Encode(nil)
	mut := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	tests := []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, ErrMalformed},
		{"short", good[:Size-1], ErrMalformed},
		{"long", append(bytes.Clone(good), 0), ErrMalformed},
		{"magic", mut(func(b []byte) []byte { b[0] = 'X'; return b }), ErrMalformed},
		{"version 0", mut(func(b []byte) []byte { b[4] = 0; return b }), ErrVersion},
		{"version 2", mut(func(b []byte) []byte { b[4] = 2; return b }), ErrVersion},
		{"type 0", mut(func(b []byte) []byte { b[5] = 0; return b }), ErrMalformed},
		{"type 3", mut(func(b []byte) []byte { b[5] = 3; return b }), ErrMalformed},
		{"reserved 1", mut(func(b []byte) []byte { b[7] = 1; return b }), ErrMalformed},
		{"reserved 2", mut(func(b []byte) []byte { b[23] = 1; return b }), ErrMalformed},
		{"request with recv time", mut(func(b []byte) []byte { b[39] = 1; return b }), ErrMalformed},
		{"request with reply time", mut(func(b []byte) []byte { b[47] = 1; return b }), ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode(tt.b)
			if !errors.Is(err, tt.want) {
				t.Errorf("Decode error = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestEncodeRejects(t *testing.T) {
	for _, p := range []Packet{
		{Type: 0},
		{Type: 9},
		{Type: Request, RecvTime: 1},
		{Type: Request, ReplyTime: 1},
	} {
		b, err := p.Encode([]byte("x"))
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("Encode(%+v) error = %v, want ErrMalformed", p, err)
		}
		if string(b) != "x" {
			t.Errorf("Encode(%+v) changed the buffer to %q", p, b)
		}
	}
}

func TestTypeString(t *testing.T) {
	for typ, want := range map[Type]string{Request: "request", Reply: "reply", 7: "type(7)"} {
		if got := typ.String(); got != want {
			t.Errorf("Type(%d).String() = %q, want %q", uint8(typ), got, want)
		}
	}
}

// FuzzDecode checks that Decode never panics and that every packet it
// accepts encodes back to the same bytes and decodes to the same value.
func FuzzDecode(f *testing.F) {
	req, _ := Packet{Type: Request, Session: 1, Seq: 2, SendTime: 3}.Encode(nil)
	rep, _ := Packet{Type: Reply, Session: 1, Seq: 2, SendTime: 3, RecvTime: 4, ReplyTime: 5}.Encode(nil)
	f.Add(req)
	f.Add(rep)
	f.Add([]byte("FNPR"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := Decode(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrVersion) {
				t.Fatalf("Decode error %v wraps neither ErrMalformed nor ErrVersion", err)
			}
			return
		}
		out, err := p.Encode(nil)
		if err != nil {
			t.Fatalf("Encode of decoded %+v: %v", p, err)
		}
		if !bytes.Equal(out, b) {
			t.Fatalf("Encode(Decode(b)) = %x, want %x", out, b)
		}
		again, err := Decode(out)
		if err != nil || again != p {
			t.Fatalf("Decode(Encode(p)) = %+v, %v; want %+v", again, err, p)
		}
	})
}
