package storage

import (
	"reflect"
	"strings"
	"testing"
)

// hashTag is the part of a key Redis Cluster hashes to find its slot: the first {...}
// with something in it, or the whole key.
func hashTag(key string) string {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			return key[s+1 : s+1+e]
		}
	}
	return key
}

// TestEveryKeyOfABoardPeriodSharesItsHashTag: the scripts of a board period run on several
// of its keys at once (the write path's value read on z, u and held, an apply on a dozen),
// which Redis Cluster allows only on one slot. Every key of a board period carries the
// board's hash tag: one without made the write path's read fail with CROSSSLOT on a
// cluster, silently (the cluster tests still passed; found by a review of the scale-out
// tests).
func TestEveryKeyOfABoardPeriodSharesItsHashTag(t *testing.T) {
	b := &Boards{prefix: "lb"}
	for _, bp := range [][2]string{{"global", "all_time"}, {"daily", "2026-11-28"}, {"match:m-1", "all_time"}, {"season", "2"}} {
		k := b.buildKeys(bp[0], bp[1])
		v := reflect.ValueOf(k)
		for i := range v.NumField() {
			if key := v.Field(i).String(); hashTag(key) != bp[0] {
				t.Errorf("%s %s: key %s (%s) hashes by %q, not the board's tag", bp[0], bp[1], v.Type().Field(i).Name, key, hashTag(key))
			}
		}
		for _, bucket := range []string{bucketState{}.key(k.u, 1), bucketState{}.key(k.us, 7)} { // entry hash buckets
			if hashTag(bucket) != bp[0] {
				t.Errorf("bucket key %s hashes by %q", bucket, hashTag(bucket))
			}
		}
	}
}
