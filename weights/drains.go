package weights

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// DrainAnnotation is the InferenceService annotation whose value lists the drains,
// as a JSON object keyed by drain ID.
const DrainAnnotation = "ome.io/traffic-drain"

// MaxWeight is the largest TrafficMap weight; valid weights are 0..MaxWeight.
const MaxWeight = 1_000_000

// Drain is one hold from the drain annotation: while it exists, the entry for
// Cluster is drained to weight 0.
type Drain struct {
	ID      string // the annotation key
	Cluster string // the TrafficMap entry cluster it holds
	Reason  string // operator context, free text
}

// ParseDrains parses a [DrainAnnotation] value strictly and returns its drains
// sorted by ID; `{}` yields an empty, non-nil slice and any error a nil slice.
// It checks structure, duplicates and whitespace only, not character sets or
// lengths, and it does not check clusters against any TrafficMap.
func ParseDrains(value string) ([]Drain, error) {
	dec := json.NewDecoder(strings.NewReader(value))
	dec.UseNumber() // numbers are only ever reported, never converted

	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("decode top-level object: %w", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("top-level value must be a JSON object keyed by override ID")
	}

	drains := []Drain{}
	seen := make(map[string]struct{})
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("decode override ID: %w", unexpectedEOF(err))
		}
		id, ok := tok.(string)
		if !ok { // unreachable: the decoder only yields strings as object keys
			return nil, fmt.Errorf("override ID must be a string, got %s", describeToken(tok))
		}
		if err := checkText("override ID", id); err != nil {
			return nil, err
		}
		if _, dup := seen[id]; dup {
			return nil, fmt.Errorf("duplicate override ID %q", id)
		}
		seen[id] = struct{}{}

		d, err := parseDrain(dec, id)
		if err != nil {
			return nil, err
		}
		drains = append(drains, d)
	}
	if err := closeObject(dec); err != nil {
		return nil, fmt.Errorf("close top-level object: %w", err)
	}

	switch tok, err := dec.Token(); {
	case err == io.EOF:
	case err != nil:
		return nil, fmt.Errorf("unexpected trailing JSON token after top-level object: %w", err)
	default:
		return nil, fmt.Errorf("unexpected trailing JSON token after top-level object: got %s", describeToken(tok))
	}

	slices.SortFunc(drains, func(a, b Drain) int { return cmp.Compare(a.ID, b.ID) })
	return drains, nil
}

// parseDrain decodes the object value of override id; the decoder is positioned
// just after the key.
func parseDrain(dec *json.Decoder, id string) (Drain, error) {
	tok, err := dec.Token()
	if err != nil {
		return Drain{}, fmt.Errorf("override %q: decode value: %w", id, unexpectedEOF(err))
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return Drain{}, fmt.Errorf("override %q must be a JSON object", id)
	}

	drain := Drain{ID: id}
	var haveCluster, haveReason bool
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return Drain{}, fmt.Errorf("override %q: decode field name: %w", id, unexpectedEOF(err))
		}
		field, ok := tok.(string)
		if !ok { // unreachable: the decoder only yields strings as object keys
			return Drain{}, fmt.Errorf("override %q field name must be a string, got %s", id, describeToken(tok))
		}
		var dst *string
		var have *bool
		switch field {
		case "cluster":
			dst, have = &drain.Cluster, &haveCluster
		case "reason":
			dst, have = &drain.Reason, &haveReason
		default:
			return Drain{}, fmt.Errorf("override %q has unknown field %q", id, field)
		}
		if *have {
			return Drain{}, fmt.Errorf("override %q has duplicate field %q", id, field)
		}
		*have = true

		tok, err = dec.Token()
		if err != nil {
			return Drain{}, fmt.Errorf("override %q field %q: decode value: %w", id, field, unexpectedEOF(err))
		}
		s, ok := tok.(string)
		if !ok {
			return Drain{}, fmt.Errorf("override %q field %q must be a string: got %s", id, field, describeToken(tok))
		}
		*dst = s
	}
	if err := closeObject(dec); err != nil {
		return Drain{}, fmt.Errorf("override %q: close object: %w", id, err)
	}

	if err := checkText(fmt.Sprintf("override %q cluster", id), drain.Cluster); err != nil {
		return Drain{}, err
	}
	if err := checkText(fmt.Sprintf("override %q reason", id), drain.Reason); err != nil {
		return Drain{}, err
	}
	return drain, nil
}

// closeObject consumes the '}' that must follow the last member of an object.
func closeObject(dec *json.Decoder) error {
	tok, err := dec.Token()
	if err != nil {
		return unexpectedEOF(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '}' { // unreachable: More reported the end
		return fmt.Errorf("expected '}', got %s", describeToken(tok))
	}
	return nil
}

// checkText enforces that a value is non-empty and carries no surrounding
// whitespace; what names the value in the message.
func checkText(what, value string) error {
	trimmed := strings.TrimSpace(value)
	if trimmed == "" {
		return fmt.Errorf("%s must be non-empty", what)
	}
	if trimmed != value {
		return fmt.Errorf("%s must not have leading or trailing whitespace", what)
	}
	return nil
}

// unexpectedEOF turns a bare io.EOF inside an open object into io.ErrUnexpectedEOF.
func unexpectedEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// describeToken names a JSON token for an error message.
func describeToken(tok json.Token) string {
	switch v := tok.(type) {
	case json.Delim:
		switch v {
		case '{':
			return "object"
		case '[':
			return "array"
		}
		return fmt.Sprintf("%q", string(v))
	case string:
		return fmt.Sprintf("string %q", v)
	case json.Number:
		return "number " + v.String()
	case bool:
		return fmt.Sprintf("boolean %t", v)
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", tok)
}
