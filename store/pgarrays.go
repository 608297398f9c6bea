package store

import (
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// textArray is a []string query parameter for a text[] that pgx encodes
// without a heap copy of each element: pgtype.FlatArray hands each string
// over as an interface, which boxes it (an allocation an element), where a
// textArray hands over a pointer to it (textRef), which fits in the
// interface. A nil textArray is NULL, as a nil []string is.
type textArray []string

// Dimensions implements pgtype.ArrayGetter.
func (a textArray) Dimensions() []pgtype.ArrayDimension {
	if a == nil {
		return nil
	}
	return []pgtype.ArrayDimension{{Length: int32(len(a)), LowerBound: 1}}
}

// Index implements pgtype.ArrayGetter.
func (a textArray) Index(i int) any { return textRef{&a[i]} }

// IndexType implements pgtype.ArrayGetter.
func (a textArray) IndexType() any { return textRef{new(string)} }

// textRef is one element of a textArray.
type textRef struct{ s *string }

// TextValue implements pgtype.TextValuer.
func (r textRef) TextValue() (pgtype.Text, error) { return pgtype.Text{String: *r.s, Valid: true}, nil }

// timeArray is a []*time.Time query parameter for a timestamptz[] that pgx
// encodes without a heap copy of each element (a nil element is NULL), as
// textArray does for text.
type timeArray []*time.Time

// Dimensions implements pgtype.ArrayGetter.
func (a timeArray) Dimensions() []pgtype.ArrayDimension {
	if a == nil {
		return nil
	}
	return []pgtype.ArrayDimension{{Length: int32(len(a)), LowerBound: 1}}
}

// Index implements pgtype.ArrayGetter.
func (a timeArray) Index(i int) any { return timeRef{a[i]} }

// IndexType implements pgtype.ArrayGetter.
func (a timeArray) IndexType() any { return timeRef{} }

// timeRef is one element of a timeArray.
type timeRef struct{ t *time.Time }

// TimestamptzValue implements pgtype.TimestamptzValuer.
func (r timeRef) TimestamptzValue() (pgtype.Timestamptz, error) {
	if r.t == nil {
		return pgtype.Timestamptz{}, nil
	}
	return pgtype.Timestamptz{Time: *r.t, Valid: true}, nil
}
