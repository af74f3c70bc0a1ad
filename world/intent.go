package world

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
)

// IntentHash returns intent_hash = SHA-256(world, height, index, kind,
// canonical params) as 64 lowercase hex digits.
//
// The byte layout below is the contract; it is pinned by test vectors
// (TestIntentHashVectors) and changing it re-identifies every intent. The
// SHA-256 input is the concatenation
//
//	L(world) U(height) U(index) L(kind) L(params)
//
// where U(n) is n as 8 bytes, big-endian, and L(b) is U(len(b)) followed by
// the bytes of b (strings as their bytes, unnormalised; params as given,
// which the kernel always passes canonical). Every field has a fixed size or
// a length prefix, so the input splits into its fields one way only and two
// different tuples never share it.
func IntentHash(world string, height, index uint64, kind string, params []byte) string {
	b := make([]byte, 0, 8*5+len(world)+len(kind)+len(params))
	b = appendField(b, []byte(world))
	b = binary.BigEndian.AppendUint64(b, height)
	b = binary.BigEndian.AppendUint64(b, index)
	b = appendField(b, []byte(kind))
	b = appendField(b, params)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func appendField(dst, b []byte) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(len(b)))
	return append(dst, b...)
}

// Hash returns the SHA-256 of b as 64 lowercase hex digits: a state hash is
// Hash(state), a reply hash Hash(reply value).
func Hash(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
