package fallback

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestFrameRoundTrip(t *testing.T) {
	packets := [][]byte{{1}, bytes.Repeat([]byte{7}, 148), bytes.Repeat([]byte{9}, MaxPacket)}
	var stream []byte
	for _, p := range packets {
		var err error
		if stream, err = AppendFrame(stream, p); err != nil {
			t.Fatal(err)
		}
	}
	if want := 3*FrameHeader + 1 + 148 + MaxPacket; len(stream) != want {
		t.Fatalf("stream of %d bytes, want %d", len(stream), want)
	}
	r := bufio.NewReader(bytes.NewReader(stream))
	buf := make([]byte, MaxPacket)
	for i, p := range packets {
		n, err := ReadFrame(r, buf)
		if err != nil || !bytes.Equal(buf[:n], p) {
			t.Fatalf("frame %d: %d bytes, %v; want %d bytes", i, n, err, len(p))
		}
	}
	if _, err := ReadFrame(r, buf); err != io.EOF {
		t.Errorf("after the last frame: %v, want io.EOF", err)
	}
}

func TestAppendFrameRejects(t *testing.T) {
	for _, n := range []int{0, MaxPacket + 1} {
		if _, err := AppendFrame(nil, make([]byte, n)); err == nil {
			t.Errorf("AppendFrame of %d bytes = nil error", n)
		}
	}
}

func TestReadFrameErrors(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		buf      int
		want     error
		text     string
	}{
		{name: "empty frame", in: "\x00\x00", buf: MaxPacket, want: ErrEmptyFrame},
		{name: "cut in the header", in: "\x00", buf: MaxPacket, want: io.ErrUnexpectedEOF},
		{name: "cut in the packet", in: "\x00\x05abc", buf: MaxPacket, want: io.ErrUnexpectedEOF},
		{name: "cut right after the header", in: "\x00\x05", buf: MaxPacket, want: io.ErrUnexpectedEOF},
		{name: "too big for the buffer", in: "\x01\x00" + strings.Repeat("x", 256), buf: 255, text: "does not fit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadFrame(strings.NewReader(tc.in), make([]byte, tc.buf))
			if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) || !strings.Contains(err.Error(), tc.text) {
				t.Errorf("ReadFrame = %v, want %v %q", err, tc.want, tc.text)
			}
		})
	}
}

// FuzzReadFrame feeds arbitrary streams to the decoder: it never panics,
// never returns more than the stream holds, and what it decodes re-encodes
// to the bytes it consumed.
func FuzzReadFrame(f *testing.F) {
	f.Add([]byte("\x00\x03abc\x00\x01z"))
	f.Add([]byte("\x00\x00"))
	f.Add([]byte("\xff\xff"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bytes.NewReader(in)
		buf := make([]byte, MaxPacket)
		var again []byte
		for i := 0; i < len(in); i++ {
			before := r.Len()
			n, err := ReadFrame(r, buf)
			if err != nil {
				if n != 0 {
					t.Fatalf("error %v with n = %d", err, n)
				}
				return
			}
			if n < 1 || n > MaxPacket || before-r.Len() != n+FrameHeader {
				t.Fatalf("decoded %d bytes, consumed %d", n, before-r.Len())
			}
			if again, err = AppendFrame(again, buf[:n]); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(again, in[:len(in)-r.Len()]) {
				t.Fatalf("re-encoded frames differ from the input")
			}
		}
	})
}
