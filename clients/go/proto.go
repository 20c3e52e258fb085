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
)

// Slots is the number of slots keys map to (SPEC 15).
const Slots = 16384

// Slot is the slot of a key: FNV-1a 64 of its bytes modulo Slots, the
// same number every Ticketing client computes. A deployment of several
// groups maps each slot to one group; routing by slot is not built yet.
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

// response is one parsed server line after the handshake.
type response struct {
	typ     byte // G T B R N Q P E M
	hasID   bool // false for "E - reason" and M
	id      uint64
	token   uint64
	owner   string // Q: "" when the key is free
	waiters uint32
	text    string // E: the reason; M: the address ("" for "M -")
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
