package ticketing

// The client side of the Ticketing line protocol: field checks, request
// lines, response parsing and the handshake proofs. Pure functions; no I/O.

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
)

// Field limits, as the server checks them.
const (
	KeyMax          = 250
	OwnerMax        = 64
	LeaseMinMs      = 1000
	LeaseMaxMs      = 250000
	WaitMaxMs       = 250000
	lineMax         = 1024
	releaseDeadline = 5000 // ms, absolute from enqueue
	secretMin       = 16
	secretMax       = 4096
	// ringPartsMax bounds n of an S answer in parts: each part holds at
	// least one range, and a ring has at most 1,024.
	ringPartsMax = 1024
)

// Slots is the number of slots keys map to (SPEC 15).
const Slots = 16384

// Slot is the slot of a key: FNV-1a 64 of its bytes modulo Slots, the
// same number every Ticketing client computes. A deployment of several
// groups maps each slot to one group, and the client sends each request
// to the group its ring names for the key's slot.
func Slot(key string) uint32 {
	h := uint64(0xcbf29ce484222325) // FNV-1a 64 offset basis
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= 0x100000001b3 // FNV 64 prime, mod 2^64
	}
	return uint32(h % Slots)
}

func visible(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

func keyOK(k string) bool   { return len(k) >= 1 && len(k) <= KeyMax && visible(k) }
func ownerOK(o string) bool { return len(o) >= 1 && len(o) <= OwnerMax && visible(o) }

// parseU64 accepts what the server writes: digits only, no leading zero
// except "0" itself, no value beyond the u64 range.
func parseU64(s string) (uint64, bool) {
	if len(s) == 0 || len(s) > 20 || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	v, err := strconv.ParseUint(s, 10, 64)
	return v, err == nil
}

func appendAcquire(b []byte, id uint64, key, owner string, leaseMs, waitMs uint32) []byte {
	b = append(b, "A "...)
	b = strconv.AppendUint(b, id, 10)
	b = append(b, ' ')
	b = append(b, key...)
	b = append(b, ' ')
	b = append(b, owner...)
	b = append(b, ' ')
	b = strconv.AppendUint(b, uint64(leaseMs), 10)
	b = append(b, ' ')
	b = strconv.AppendUint(b, uint64(waitMs), 10)
	return append(b, '\n')
}

func appendRelease(b []byte, id uint64, key, owner string, token uint64) []byte {
	b = append(b, "R "...)
	b = strconv.AppendUint(b, id, 10)
	b = append(b, ' ')
	b = append(b, key...)
	b = append(b, ' ')
	b = append(b, owner...)
	b = append(b, ' ')
	b = strconv.AppendUint(b, token, 10)
	return append(b, '\n')
}

func appendQuery(b []byte, id uint64, key string) []byte {
	b = append(b, "Q "...)
	b = strconv.AppendUint(b, id, 10)
	b = append(b, ' ')
	b = append(b, key...)
	return append(b, '\n')
}

func appendPing(b []byte, id uint64) []byte {
	b = append(b, "P "...)
	b = strconv.AppendUint(b, id, 10)
	return append(b, '\n')
}

func appendRing(b []byte, id uint64) []byte {
	b = append(b, "S "...)
	b = strconv.AppendUint(b, id, 10)
	return append(b, '\n')
}

// response is one parsed server line after the handshake.
type response struct {
	typ     byte // G T B R N Q P E M W S
	hasID   bool // false for "E - reason" and M
	id      uint64
	token   uint64
	owner   string // Q: "" when the key is free
	waiters uint32
	text    string // E: the reason; M: the address ("" for "M -"); S: the body (of this part)
	slot    uint32 // W: the key's slot
	version uint64 // W: the ring version the group judged by; S: the ring's version
	part    uint32 // S: this line is part k of n (1 of 1: the one-line form)
	parts   uint32
}

// parseRingPart reads "<k>/<n>" of an S answer in parts: 1 <= k <= n,
// 2 <= n <= ringPartsMax, both numbers as SPEC 5 writes them.
func parseRingPart(s string) (k, n uint32, ok bool) {
	i := strings.IndexByte(s, '/')
	if i < 0 {
		return 0, 0, false
	}
	a, ok1 := parseU64(s[:i])
	b, ok2 := parseU64(s[i+1:])
	if !ok1 || !ok2 || a < 1 || a > b || b < 2 || b > ringPartsMax {
		return 0, 0, false
	}
	return uint32(a), uint32(b), true
}

// parseResponse follows the server's grammar exactly; false for anything
// else (the connection is then dropped as a protocol error).
func parseResponse(line string) (response, bool) {
	var r response
	line = strings.TrimSuffix(line, "\r")
	w := strings.Split(line, " ")
	if len(w) < 2 || len(w[0]) != 1 {
		return r, false
	}
	for _, f := range w {
		if f == "" {
			return r, false
		}
	}
	r.typ = w[0][0]
	if r.typ == 'M' {
		if len(w) != 2 {
			return r, false
		}
		if w[1] == "-" {
			return r, true
		}
		r.text = w[1]
		c := strings.LastIndexByte(w[1], ':')
		p, ok := parseU64(w[1][c+1:])
		return r, visible(w[1]) && c >= 1 && ok && p >= 1 && p <= 65535
	}
	if r.typ == 'E' && w[1] == "-" {
		r.hasID = false
	} else {
		id, ok := parseU64(w[1])
		if !ok {
			return r, false
		}
		r.id, r.hasID = id, true
	}
	switch r.typ {
	case 'T', 'B', 'R', 'N', 'P':
		return r, len(w) == 2
	case 'G':
		if len(w) != 3 {
			return r, false
		}
		t, ok := parseU64(w[2])
		r.token = t
		return r, ok && t >= 1
	case 'Q':
		if len(w) != 5 || !ownerOK(w[2]) {
			return r, false
		}
		t, ok1 := parseU64(w[3])
		n, ok2 := parseU64(w[4])
		if !ok1 || !ok2 || n > 0xffffffff {
			return r, false
		}
		r.token, r.waiters = t, uint32(n)
		if t == 0 {
			return r, w[2] == "-" && n == 0
		}
		r.owner = w[2]
		return r, true
	case 'W': // W <id> <slot> <ring_version>
		if len(w) != 4 {
			return r, false
		}
		s, ok1 := parseU64(w[2])
		v, ok2 := parseU64(w[3])
		if !ok1 || !ok2 || s >= Slots {
			return r, false
		}
		r.slot, r.version = uint32(s), v
		return r, true
	case 'S': // S <id> <version> <body>, or S <id> <version> <k>/<n> <part>
		if (len(w) != 4 && len(w) != 5) || !visible(w[len(w)-1]) {
			return r, false
		}
		v, ok := parseU64(w[2])
		if !ok {
			return r, false
		}
		r.version, r.text = v, w[len(w)-1]
		if len(w) == 4 {
			r.part, r.parts = 1, 1
			return r, v != 0 || r.text == "-" // no ring (version 0) has no ranges
		}
		// Parts only for a ring too long for one line: ranges, and a version.
		r.part, r.parts, ok = parseRingPart(w[3])
		return r, ok && v != 0 && r.text != "-"
	case 'E':
		if len(w) != 3 || !visible(w[2]) {
			return r, false
		}
		r.text = w[2]
		return r, true
	}
	return r, false
}

// proof is HMAC-SHA256(secret, "ticketing/1 <side> <snonce> <cnonce>") in
// lowercase hex; side is "client" or "server".
func proof(secret []byte, side, snonce, cnonce string) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("ticketing/1 " + side + " " + snonce + " " + cnonce))
	return hex.EncodeToString(m.Sum(nil))
}

func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < n; i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
