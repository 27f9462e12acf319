package storage

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// An entry's record is what the entry hashes hold for a user (redis_scripts.go): packed, so
// that a million-entry board costs little more than its sorted set. It is
//
//	8 bytes   the sorted-set member's prefix: MaxInt64 - reached µs, big-endian (so the
//	          member, prefix + user id, orders ties by who reached the value first)
//	uvarint   the entry's version (the scripts read it for their version guard)
//	uvarint   updated - reached in µs (zigzag), times two, plus one on boards whose sort
//	          key is the negated value (asc)
//	uvarint   the value, as its difference (zigzag) from the one the sort key gives: zero
//	          unless the value is beyond ±2^53, where a sorted-set score is not exact
//
// The scripts read nothing else of it: they hand it to Go with the entry's sort key.

// memberPrefixLen is the length of the time prefix of a sorted-set member.
const memberPrefixLen = 8

// entryRecord packs an entry state.
func entryRecord(s EntryState) string {
	buf := make([]byte, memberPrefixLen, memberPrefixLen+3*binary.MaxVarintLen64)
	binary.BigEndian.PutUint64(buf, invertedTime(s.ReachedAt))
	buf = binary.AppendUvarint(buf, uint64(s.Version))
	negated := s.SortKey != s.Score
	flags := zigzag(s.UpdatedAt.UnixMicro()-s.ReachedAt.UnixMicro()) << 1
	if negated {
		flags |= 1
	}
	buf = binary.AppendUvarint(buf, flags)
	// The difference wraps around: whatever it is, adding it back gives the value.
	diff := int64(uint64(s.Score) - uint64(scoreValue(float64(s.SortKey), negated)))
	return string(binary.AppendUvarint(buf, zigzag(diff)))
}

func zigzag(v int64) uint64   { return uint64(v<<1 ^ v>>63) }
func unzigzag(u uint64) int64 { return int64(u>>1) ^ -int64(u&1) }

// scoreValue is the value a sort key (as Redis holds it: a double) stands for.
func scoreValue(sortKey float64, negated bool) int64 {
	var v int64
	switch {
	case sortKey >= math.MaxInt64:
		v = math.MaxInt64
	case sortKey <= math.MinInt64:
		v = math.MinInt64
	default:
		v = int64(sortKey)
	}
	if negated {
		return -v
	}
	return v
}

// storedEntry is an entry as Redis holds it.
type storedEntry struct {
	score, version   int64
	reached, updated time.Time
	member           string
}

var errBadRecord = errors.New("malformed entry record")

// decodeRecord reads a user's record, with the sort key Redis holds for its member.
func decodeRecord(user, rec string, sortKey float64) (storedEntry, error) {
	if len(rec) < memberPrefixLen+3 {
		return storedEntry{}, badRecord(user, rec)
	}
	inv := binary.BigEndian.Uint64([]byte(rec[:memberPrefixLen]))
	rest := []byte(rec[memberPrefixLen:])
	version, n1 := binary.Uvarint(rest)
	if n1 <= 0 {
		return storedEntry{}, badRecord(user, rec)
	}
	flags, n2 := binary.Uvarint(rest[n1:])
	if n2 <= 0 {
		return storedEntry{}, badRecord(user, rec)
	}
	diff, n3 := binary.Uvarint(rest[n1+n2:])
	if n3 <= 0 || n1+n2+n3 != len(rest) || inv > math.MaxInt64 {
		return storedEntry{}, badRecord(user, rec)
	}
	base := scoreValue(sortKey, flags&1 == 1)
	reached := math.MaxInt64 - int64(inv)
	return storedEntry{
		score:   int64(uint64(base) + uint64(unzigzag(diff))),
		version: int64(version),
		reached: time.UnixMicro(reached).UTC(),
		updated: time.UnixMicro(reached + unzigzag(flags>>1)).UTC(),
		member:  rec[:memberPrefixLen] + user,
	}, nil
}

// badRecord is decodeRecord's error (built only when a record is bad: every read decodes).
func badRecord(user, rec string) error { return fmt.Errorf("%w for %s: %x", errBadRecord, user, rec) }

// invertedTime is MaxInt64 - t in µs: later times give smaller numbers.
func invertedTime(t time.Time) uint64 { return uint64(math.MaxInt64 - t.UnixMicro()) }

// Member is the position spelling of an entry's place among equal sort keys: the inverted
// time it reached its value (16 hex digits) and the user ("<hex>:<user>"); what cursors
// carry. Redis holds the same as 8 bytes followed by the user (redisMember).
func Member(userID string, reachedAt time.Time) string {
	return fmt.Sprintf("%016x:%s", invertedTime(reachedAt), userID)
}

// redisMember is the sorted-set member of a user's entry.
func redisMember(userID string, reachedAt time.Time) string {
	var b [memberPrefixLen]byte
	binary.BigEndian.PutUint64(b[:], invertedTime(reachedAt))
	return string(b[:]) + userID
}

// positionMember spells a sorted-set member as a position's Member.
func positionMember(member string) string {
	if len(member) <= memberPrefixLen {
		return member
	}
	return hex.EncodeToString([]byte(member[:memberPrefixLen])) + ":" + member[memberPrefixLen:]
}

// redis spells a position's member as the sorted set holds it.
func (p Position) redis() (string, error) {
	reached, user, err := p.parse()
	if err != nil {
		return "", err
	}
	return redisMember(user, reached), nil
}

// parseSortKey reads a sort key as Redis answers it (a double, in any spelling).
func parseSortKey(v any) (float64, error) {
	switch x := v.(type) {
	case float64:
		return x, nil
	case int64:
		return float64(x), nil
	case string:
		return strconv.ParseFloat(x, 64)
	}
	return 0, fmt.Errorf("sort key %v: unexpected type %T", v, v)
}

// bucketState is the linear-hashing state of a board period's entry hashes (the field ""
// of bucket 0; redis_scripts.go).
type bucketState struct{ level, split int64 }

// parseBucketState reads the state from the HGET of field "" of bucket 0.
func parseBucketState(cmd *redis.StringCmd) (bucketState, error) {
	raw, err := cmd.Result()
	if errors.Is(err, redis.Nil) {
		return bucketState{}, nil
	}
	if err != nil {
		return bucketState{}, redisErr("read bucket state", err)
	}
	var st bucketState
	var deadline int64
	if _, err := fmt.Sscanf(raw, "%d|%d|%d", &st.level, &st.split, &deadline); err != nil || st.level > 40 || st.split < 0 || st.split >= 1<<st.level {
		return bucketState{}, fmt.Errorf("bucket state %q: malformed", raw)
	}
	return st, nil
}

// count is the number of buckets.
func (s bucketState) count() int64 { return 1<<s.level + s.split }

// key is the key of bucket i of the entry hashes whose bucket 0 is u.
func (s bucketState) key(u string, i int64) string {
	if i == 0 {
		return u
	}
	return u + ":" + strconv.FormatInt(i, 10)
}

// bucketKey is the bucket of a user, as the scripts' bucketOf finds it.
func (s bucketState) bucketKey(u, user string) string {
	h := userHash(user)
	i := int64(h % (1 << s.level))
	if i < s.split {
		i = int64(h % (1 << (s.level + 1)))
	}
	return s.key(u, i)
}

// userHash is the scripts' userHash: the user id's bytes as a polynomial in 131 modulo the
// prime 4294967291 (Lua computes it exactly in doubles: it stays below 2^40).
func userHash(user string) uint64 {
	var h uint64
	for i := 0; i < len(user); i++ {
		h = (h*131 + uint64(user[i])) % 4294967291
	}
	return h
}

// bucketKeys lists the keys of the entry hashes whose bucket 0 is u, and whether u holds
// their state (a field that is not an entry).
func (b *Boards) bucketKeys(ctx context.Context, u string) ([]string, bool, error) {
	cmd := b.rdb.HGet(ctx, u, "")
	st, err := parseBucketState(cmd)
	if err != nil {
		return nil, false, err
	}
	keys := make([]string, st.count())
	for i := range keys {
		keys[i] = st.key(u, int64(i))
	}
	return keys, cmd.Err() == nil, nil
}
