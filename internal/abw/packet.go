package abw

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Port is the UDP port of the responder on a gateway's transit address.
const Port = 51822

// Wire format (big endian), every message starting with magic "FNBW",
// version 1 and a type byte:
//
//	probe    session u64, stream u32, seq u16, count u16, sent i64 (ns), padding
//	request  session u64, first stream u32, streams u16
//	report   session u64, stream u32, count u16, received u16, base i64 (ns),
//	         received × (seq u16, owd−base i32 ns)
//
// A report carries the one-way delays (arrival time at the responder minus
// the sender's timestamp) of one stream; the clocks need not agree, only
// the delays' differences are used.
const (
	version     = 1
	typeProbe   = 1
	typeRequest = 2
	typeReport  = 3

	headerLen  = 6
	probeLen   = headerLen + 8 + 4 + 2 + 2 + 8
	requestLen = headerLen + 8 + 4 + 2
	reportLen  = headerLen + 8 + 4 + 2 + 2 + 8
	entryLen   = 2 + 4

	// MaxStreamLen bounds K so a report fits one packet in a 1420-byte
	// tunnel (30 + 200 × 6 bytes).
	MaxStreamLen = 200
)

var magic = [4]byte{'F', 'N', 'B', 'W'}

var errNotOurs = errors.New("not an available-bandwidth message")

// probe is one packet of a stream.
type probe struct {
	session uint64
	stream  uint32
	seq     uint16
	count   uint16
	sent    int64
}

// request asks for the reports of streams first .. first+n-1.
type request struct {
	session uint64
	first   uint32
	n       uint16
}

// arrival is one received packet: its sequence number and one-way delay.
type arrival struct {
	seq uint16
	owd int64 // ns
}

// report is what the responder saw of one stream.
type report struct {
	session  uint64
	stream   uint32
	count    uint16
	arrivals []arrival
}

func putHeader(b []byte, typ byte) {
	copy(b, magic[:])
	b[4], b[5] = version, typ
}

// encodeProbe writes p into b (len(b) ≥ probeLen; the rest is padding).
func encodeProbe(b []byte, p probe) {
	putHeader(b, typeProbe)
	binary.BigEndian.PutUint64(b[6:], p.session)
	binary.BigEndian.PutUint32(b[14:], p.stream)
	binary.BigEndian.PutUint16(b[18:], p.seq)
	binary.BigEndian.PutUint16(b[20:], p.count)
	binary.BigEndian.PutUint64(b[22:], uint64(p.sent))
}

func encodeRequest(r request) []byte {
	b := make([]byte, requestLen)
	putHeader(b, typeRequest)
	binary.BigEndian.PutUint64(b[6:], r.session)
	binary.BigEndian.PutUint32(b[14:], r.first)
	binary.BigEndian.PutUint16(b[18:], r.n)
	return b
}

// encodeReport renders r; delays more than ±2 s from the first are
// clamped (a stream lasts milliseconds).
func encodeReport(r report) []byte {
	n := min(len(r.arrivals), MaxStreamLen)
	b := make([]byte, reportLen+n*entryLen)
	putHeader(b, typeReport)
	binary.BigEndian.PutUint64(b[6:], r.session)
	binary.BigEndian.PutUint32(b[14:], r.stream)
	binary.BigEndian.PutUint16(b[18:], r.count)
	binary.BigEndian.PutUint16(b[20:], uint16(n))
	var base int64
	if n > 0 {
		base = r.arrivals[0].owd
	}
	binary.BigEndian.PutUint64(b[22:], uint64(base))
	for i, a := range r.arrivals[:n] {
		off := reportLen + i*entryLen
		d := max(min(a.owd-base, 1<<31-1), -1<<31)
		binary.BigEndian.PutUint16(b[off:], a.seq)
		binary.BigEndian.PutUint32(b[off+2:], uint32(int32(d)))
	}
	return b
}

// messageType checks the header and returns the type.
func messageType(b []byte) (byte, error) {
	if len(b) < headerLen || [4]byte(b[:4]) != magic {
		return 0, errNotOurs
	}
	if b[4] != version {
		return 0, fmt.Errorf("available-bandwidth message version %d, want %d (run the same fednet version on both gateways)", b[4], version)
	}
	return b[5], nil
}

func decodeProbe(b []byte) (probe, error) {
	if t, err := messageType(b); err != nil || t != typeProbe || len(b) < probeLen {
		return probe{}, errors.Join(errNotOurs, err)
	}
	return probe{
		session: binary.BigEndian.Uint64(b[6:]),
		stream:  binary.BigEndian.Uint32(b[14:]),
		seq:     binary.BigEndian.Uint16(b[18:]),
		count:   binary.BigEndian.Uint16(b[20:]),
		sent:    int64(binary.BigEndian.Uint64(b[22:])),
	}, nil
}

func decodeRequest(b []byte) (request, error) {
	if t, err := messageType(b); err != nil || t != typeRequest || len(b) < requestLen {
		return request{}, errors.Join(errNotOurs, err)
	}
	return request{
		session: binary.BigEndian.Uint64(b[6:]),
		first:   binary.BigEndian.Uint32(b[14:]),
		n:       binary.BigEndian.Uint16(b[18:]),
	}, nil
}

func decodeReport(b []byte) (report, error) {
	if t, err := messageType(b); err != nil || t != typeReport || len(b) < reportLen {
		return report{}, errors.Join(errNotOurs, err)
	}
	r := report{
		session: binary.BigEndian.Uint64(b[6:]),
		stream:  binary.BigEndian.Uint32(b[14:]),
		count:   binary.BigEndian.Uint16(b[18:]),
	}
	n := int(binary.BigEndian.Uint16(b[20:]))
	if len(b) < reportLen+n*entryLen {
		return report{}, fmt.Errorf("available-bandwidth report of %d bytes announces %d arrivals", len(b), n)
	}
	base := int64(binary.BigEndian.Uint64(b[22:]))
	r.arrivals = make([]arrival, n)
	for i := range n {
		off := reportLen + i*entryLen
		r.arrivals[i] = arrival{
			seq: binary.BigEndian.Uint16(b[off:]),
			owd: base + int64(int32(binary.BigEndian.Uint32(b[off+2:]))),
		}
	}
	return r, nil
}
