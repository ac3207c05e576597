package history

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/stockflow/stockflow/order"
)

// record is any line of a history file: the union of the events' fields.
type record struct {
	Event          string       `json:"event"`
	Worker         string       `json:"worker"`
	Time           time.Time    `json:"time"`
	Invoked        time.Time    `json:"invoked"`
	Key            string       `json:"key"`
	Owner          string       `json:"owner"`
	Token          int64        `json:"token"`
	Op             string       `json:"op"`
	Kind           Kind         `json:"kind"`
	SKU            string       `json:"sku"`
	Order          string       `json:"order"`
	Quantity       int64        `json:"quantity"`
	Status         order.Status `json:"status"`
	Reason         order.Reason `json:"reason"`
	AvailableAfter int64        `json:"available_after"`
	Replayed       bool         `json:"replayed"`
	Failure        Failure      `json:"failure"`
	Error          string       `json:"error"`
}

// located is a record and the file:line it came from.
type located struct {
	record
	src string
}

// Load reads the history files written by Recorders. A last line without its newline (a process killed
// while writing it) is left out and listed in History.Truncated; any other line that is not a valid
// event fails with its file:line, as does a return or release that matches nothing.
func Load(paths ...string) (History, error) {
	var recs []located
	var truncated []string
	for _, path := range paths {
		r, t, err := readFile(path)
		if err != nil {
			return History{}, err
		}
		recs, truncated = append(recs, r...), append(truncated, t...)
	}
	h, err := assemble(recs)
	h.Truncated = truncated
	return h, err
}

// readFile parses every line of path; truncated holds the last line when it is incomplete.
func readFile(path string) (recs []located, truncated []string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("history: %w", err)
	}
	defer f.Close()
	br := bufio.NewReader(f)
	for n := 1; ; n++ {
		line, rerr := br.ReadBytes('\n')
		if rerr != nil && !errors.Is(rerr, io.EOF) {
			return nil, nil, fmt.Errorf("history: %s:%d: %w", path, n, rerr)
		}
		if len(line) == 0 {
			return recs, nil, nil
		}
		src := fmt.Sprintf("%s:%d", path, n)
		rec, perr := parseLine(line)
		switch {
		case perr != nil && rerr != nil: // no newline: the writer died mid-line
			return recs, []string{src}, nil
		case perr != nil:
			return nil, nil, fmt.Errorf("history: %s: %w", src, perr)
		}
		recs = append(recs, located{rec, src})
		if rerr != nil {
			return recs, nil, nil
		}
	}
}

// parseLine decodes one event strictly: unknown fields, trailing data and missing fields are errors.
func parseLine(line []byte) (record, error) {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	var rec record
	if err := dec.Decode(&rec); err != nil {
		return record{}, fmt.Errorf("not a history event: %w: %q", err, truncate(line))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return record{}, fmt.Errorf("not a history event: data after the object: %q", truncate(line))
	}
	if err := rec.validate(); err != nil {
		return record{}, fmt.Errorf("%s event: %w", cmp.Or(rec.Event, "empty"), err)
	}
	return rec, nil
}

func truncate(line []byte) []byte {
	line = bytes.TrimRight(line, "\n")
	if len(line) > 120 {
		return append(line[:120:120], "..."...)
	}
	return line
}

// validate checks that rec has the fields its event needs.
func (rec *record) validate() error {
	if rec.Worker == "" || rec.Time.IsZero() {
		return errors.New(`"worker" and "time" are required`)
	}
	switch rec.Event {
	case "acquired", "released":
		return rec.validateLock()
	case "invoke":
		return rec.validateInvoke()
	case "return", "fail":
		return rec.validateEnd()
	}
	return fmt.Errorf("unknown event %q (want acquired, released, invoke, return or fail)", rec.Event)
}

func (rec *record) validateLock() error {
	switch {
	case rec.Key == "" || rec.Owner == "":
		return errors.New(`"key" and "owner" are required`)
	case rec.Token <= 0:
		return fmt.Errorf("token %d: want > 0", rec.Token)
	case rec.Event == "acquired" && (rec.Invoked.IsZero() || rec.Invoked.After(rec.Time)):
		return fmt.Errorf(`"invoked" %v must be set and not after "time" %v`, rec.Invoked, rec.Time)
	}
	return nil
}

func (rec *record) validateInvoke() error {
	switch {
	case rec.Op == "" || rec.SKU == "" || rec.Order == "":
		return errors.New(`"op", "sku" and "order" are required`)
	case rec.Kind != Reserve && rec.Kind != Release:
		return fmt.Errorf("kind %q: want %s or %s", rec.Kind, Reserve, Release)
	case rec.Quantity < 0 || rec.Token < 0:
		return fmt.Errorf("quantity %d, token %d: want >= 0", rec.Quantity, rec.Token)
	}
	return nil
}

func (rec *record) validateEnd() error {
	switch {
	case rec.Op == "":
		return errors.New(`"op" is required`)
	case rec.Event == "return" && rec.Status == "":
		return errors.New(`"status" is required`)
	case rec.Event == "fail" && rec.Failure != Refused && rec.Failure != Unknown:
		return fmt.Errorf("failure %q: want %s or %s", rec.Failure, Refused, Unknown)
	}
	return nil
}
