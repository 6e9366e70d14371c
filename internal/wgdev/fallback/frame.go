package fallback

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// MaxPacket is the largest packet a frame carries: its length is a 16-bit
// number.
const MaxPacket = 1<<16 - 1

// FrameHeader is what framing adds to each packet: its length, 2 bytes,
// big-endian.
const FrameHeader = 2

// ErrEmptyFrame is returned for a frame of length 0, which no sender
// writes (a WireGuard message is at least 32 bytes): the stream is not
// one of ours or is corrupt.
var ErrEmptyFrame = errors.New("fallback: frame of length 0")

// AppendFrame appends the frame of packet p (2-byte big-endian length, then
// p) to dst. A packet that is empty or longer than MaxPacket is an error.
func AppendFrame(dst, p []byte) ([]byte, error) {
	if len(p) == 0 || len(p) > MaxPacket {
		return dst, fmt.Errorf("fallback: packet of %d bytes cannot be framed: want 1 to %d", len(p), MaxPacket)
	}
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(p)))
	return append(dst, p...), nil
}

// ReadFrame reads one frame from r into buf and returns the packet's
// length. buf must hold MaxPacket bytes, or the frame's packet is an
// error. At a clean end of the stream (no byte of a new frame) it returns
// io.EOF; a stream that ends inside a frame gives io.ErrUnexpectedEOF.
// After any error the stream is out of step and must be closed.
func ReadFrame(r io.Reader, buf []byte) (int, error) {
	var hdr [FrameHeader]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, err
	}
	n := int(binary.BigEndian.Uint16(hdr[:]))
	switch {
	case n == 0:
		return 0, ErrEmptyFrame
	case n > len(buf):
		return 0, fmt.Errorf("fallback: frame of %d bytes does not fit a buffer of %d", n, len(buf))
	}
	if _, err := io.ReadFull(r, buf[:n]); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return 0, err
	}
	return n, nil
}
