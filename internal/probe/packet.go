// Package probe measures a link between two gateways with a small UDP probe
// protocol of fednet's own: round-trip time, loss and RFC 3550 interarrival
// jitter, kept as a 24-hour history per link.
//
// The package has three layers:
//
//   - the wire format: [Packet], [Packet.Encode] and [Decode], a fixed
//     48-byte datagram (see docs/probe.md for the table of fields);
//   - pure scoring: [Summarize], [Percentile], [Jitter] and [History] take
//     samples and times from the caller and never read a clock;
//   - the network side: a [Responder] answers requests on a
//     net.PacketConn, and a [Prober] sends one request per interval to one
//     target, matches the replies and turns them into [Sample] values.
//
// The agent is planned to run one Prober per link between transit addresses
// inside the tunnels; this package does not know about links or tunnels.
package probe

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Magic opens every probe packet.
const Magic = "FNPR"

// Version is the protocol version this package speaks. Decode rejects any
// other version with an error wrapping [ErrVersion].
const Version = 1

// Size is the length in bytes of every probe packet, request or reply.
// Replies are exactly as long as requests, so a responder never amplifies.
const Size = 48

// Offsets of the fields in a packet. All integers are big-endian.
const (
	offMagic     = 0  // 4 bytes, "FNPR"
	offVersion   = 4  // 1 byte
	offType      = 5  // 1 byte
	offReserved1 = 6  // 2 bytes, zero
	offSession   = 8  // 8 bytes
	offSeq       = 16 // 4 bytes
	offReserved2 = 20 // 4 bytes, zero
	offSendTime  = 24 // 8 bytes, int64 ns
	offRecvTime  = 32 // 8 bytes, int64 ns, zero in requests
	offReplyTime = 40 // 8 bytes, int64 ns, zero in requests
)

// Errors returned (wrapped) by [Decode] and [Packet.Encode].
var (
	// ErrMalformed means the bytes are not a probe packet: wrong length,
	// wrong magic, unknown type, non-zero reserved bytes, or responder
	// timestamps set on a request.
	ErrMalformed = errors.New("malformed probe packet")
	// ErrVersion means the packet is a probe packet of another version.
	ErrVersion = errors.New("unsupported probe version")
)

// Type says whether a packet is a request or a reply.
type Type uint8

// Packet types. Zero is not a valid type.
const (
	Request Type = 1
	Reply   Type = 2
)

// String returns "request", "reply", or "type(N)" for an unknown value.
func (t Type) String() string {
	switch t {
	case Request:
		return "request"
	case Reply:
		return "reply"
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// Packet is one probe request or reply. It is plain data with no behaviour
// beyond encoding.
//
// Timestamps are nanoseconds since the Unix epoch, each on the clock of the
// machine that took it: SendTime on the prober's, RecvTime and ReplyTime on
// the responder's. Only differences of timestamps from the same clock are
// meaningful to the prober, so the two clocks need not agree.
type Packet struct {
	Type    Type
	Session uint64 // chosen by the prober, random per Prober
	Seq     uint32 // per session, starting at 0
	// SendTime is when the prober sent the request; a reply echoes it.
	SendTime int64
	// RecvTime is when the responder received the request (replies only).
	RecvTime int64
	// ReplyTime is when the responder sent the reply (replies only).
	ReplyTime int64
}

// Encode appends the Size-byte wire form of p to b and returns the extended
// slice. It fails, wrapping [ErrMalformed], if p.Type is not Request or
// Reply, or if a request carries responder timestamps.
func (p Packet) Encode(b []byte) ([]byte, error) {
	if err := p.check(); err != nil {
		return b, fmt.Errorf("encoding probe packet: %w", err)
	}
	var w [Size]byte
	copy(w[offMagic:], Magic)
	w[offVersion] = Version
	w[offType] = byte(p.Type)
	binary.BigEndian.PutUint64(w[offSession:], p.Session)
	binary.BigEndian.PutUint32(w[offSeq:], p.Seq)
	binary.BigEndian.PutUint64(w[offSendTime:], uint64(p.SendTime))
	binary.BigEndian.PutUint64(w[offRecvTime:], uint64(p.RecvTime))
	binary.BigEndian.PutUint64(w[offReplyTime:], uint64(p.ReplyTime))
	return append(b, w[:]...), nil
}

func (p Packet) check() error {
	switch p.Type {
	case Request:
		if p.RecvTime != 0 || p.ReplyTime != 0 {
			return fmt.Errorf("%w: request carries responder timestamps", ErrMalformed)
		}
	case Reply:
	default:
		return fmt.Errorf("%w: unknown type %d", ErrMalformed, uint8(p.Type))
	}
	return nil
}

// Decode parses one packet. It accepts exactly the bytes Encode produces:
// the length must be Size, the magic "FNPR", the version [Version], the
// type Request or Reply, the reserved bytes zero, and a request's responder
// timestamps zero. Errors wrap [ErrMalformed] or [ErrVersion].
func Decode(b []byte) (Packet, error) {
	if len(b) != Size {
		return Packet{}, fmt.Errorf("%w: length %d, want %d", ErrMalformed, len(b), Size)
	}
	if string(b[offMagic:offMagic+4]) != Magic {
		return Packet{}, fmt.Errorf("%w: bad magic %q", ErrMalformed, b[offMagic:offMagic+4])
	}
	if b[offVersion] != Version {
		return Packet{}, fmt.Errorf("%w: version %d, want %d", ErrVersion, b[offVersion], Version)
	}
	if binary.BigEndian.Uint16(b[offReserved1:]) != 0 || binary.BigEndian.Uint32(b[offReserved2:]) != 0 {
		return Packet{}, fmt.Errorf("%w: reserved bytes not zero", ErrMalformed)
	}
	p := Packet{
		Type:      Type(b[offType]),
		Session:   binary.BigEndian.Uint64(b[offSession:]),
		Seq:       binary.BigEndian.Uint32(b[offSeq:]),
		SendTime:  int64(binary.BigEndian.Uint64(b[offSendTime:])),
		RecvTime:  int64(binary.BigEndian.Uint64(b[offRecvTime:])),
		ReplyTime: int64(binary.BigEndian.Uint64(b[offReplyTime:])),
	}
	if err := p.check(); err != nil {
		return Packet{}, err
	}
	return p, nil
}
