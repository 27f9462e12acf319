package storage

import (
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// pgTexts, pgInt64s, pgTimes and pgBytes are text[], bigint[], timestamptz[] and bytea[] parameters (the unnest
// arrays of the set-based statements) that pgx encodes without a heap copy per element:
// a plain slice's elements are each boxed into an interface on the way (strings, times
// and all but the smallest integers allocate), a pointer into the slice is not.
type (
	pgTexts  []string
	pgInt64s []int64
	pgTimes  []time.Time
	pgBytes  [][]byte
)

type (
	textElem  string
	int64Elem int64
	timeElem  time.Time
	bytesElem []byte
)

func (e *textElem) TextValue() (pgtype.Text, error) {
	return pgtype.Text{String: string(*e), Valid: true}, nil
}

func (e *int64Elem) Int64Value() (pgtype.Int8, error) {
	return pgtype.Int8{Int64: int64(*e), Valid: true}, nil
}

func (e *timeElem) TimestamptzValue() (pgtype.Timestamptz, error) {
	return pgtype.Timestamptz{Time: time.Time(*e), Valid: true}, nil
}

// BytesValue of a nil slice is nil: NULL, as for a nil []byte.
func (e *bytesElem) BytesValue() ([]byte, error) { return *e, nil }

func (a pgTexts) Dimensions() []pgtype.ArrayDimension  { return dimensions(a == nil, len(a)) }
func (a pgTexts) Index(i int) any                      { return (*textElem)(&a[i]) }
func (a pgTexts) IndexType() any                       { return (*textElem)(nil) }
func (a pgInt64s) Dimensions() []pgtype.ArrayDimension { return dimensions(a == nil, len(a)) }
func (a pgInt64s) Index(i int) any                     { return (*int64Elem)(&a[i]) }
func (a pgInt64s) IndexType() any                      { return (*int64Elem)(nil) }
func (a pgTimes) Dimensions() []pgtype.ArrayDimension  { return dimensions(a == nil, len(a)) }
func (a pgTimes) Index(i int) any                      { return (*timeElem)(&a[i]) }
func (a pgTimes) IndexType() any                       { return (*timeElem)(nil) }
func (a pgBytes) Dimensions() []pgtype.ArrayDimension  { return dimensions(a == nil, len(a)) }
func (a pgBytes) Index(i int) any                      { return (*bytesElem)(&a[i]) }
func (a pgBytes) IndexType() any                       { return (*bytesElem)(nil) }

// dimensions is a flat array's: none (NULL) for a nil slice, as pgx encodes a nil []T.
func dimensions(null bool, n int) []pgtype.ArrayDimension {
	if null {
		return nil
	}
	return []pgtype.ArrayDimension{{Length: int32(n), LowerBound: 1}}
}
