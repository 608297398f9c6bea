package schemas

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
)

// AuditBatchVersion is the version an [AuditBatch] carries in its "v"
// field. Version 1 is the [AuditRecord] alone, one a message, which has no
// "v" field.
const AuditBatchVersion = 2

// AuditBatch is the message on ax.audit.<task> from version 2 of the audit
// protocol: records of one task, each the documented [AuditRecord]
// unchanged, in the order the relay publishes them (an instance's records
// in the order of its transitions). Its Nats-Msg-Id is the id of its last
// record. Read either version with [DecodeAuditMessage].
type AuditBatch struct {
	// Version is AuditBatchVersion.
	Version int `json:"v"`
	// Task is the task of every record, the subject's last token.
	Task string `json:"task"`
	// Records are one or more records of Task.
	Records []AuditRecord `json:"records"`
}

// AppendAuditBatch appends to b the encoding of an [AuditBatch] of task
// holding recs, as json.Marshal writes it, without its reflection where
// the records are plain.
func AppendAuditBatch(b []byte, task string, recs []AuditRecord) ([]byte, error) {
	start := len(b)
	w := plainWriter{b: b, ok: true}
	w.int(`{"v":`, AuditBatchVersion)
	w.str(`,"task":`, task)
	w.b = append(w.b, `,"records":[`...)
	for i := range recs {
		if i > 0 {
			w.b = append(w.b, ',')
		}
		if !w.ok {
			break
		}
		var ok bool
		if w.b, ok = appendPlainAuditRecord(w.b, &recs[i]); !ok {
			w.ok = false
		}
	}
	if w.ok {
		return append(w.b, "]}"...), nil
	}
	data, err := json.Marshal(AuditBatch{Version: AuditBatchVersion, Task: task, Records: recs})
	if err != nil {
		return b[:start], err
	}
	return append(w.b[:start], data...), nil
}

// DecodeAuditMessage reads the body of a message on ax.audit.<task>,
// whichever version of the audit protocol wrote it: an [AuditBatch]
// (version 2, a "v" field of 2) or one [AuditRecord] (version 1, no "v"
// field). It refuses a version it does not know, saying which it knows.
func DecodeAuditMessage(data []byte) ([]AuditRecord, error) {
	if recs, ok := decodePlainAuditBatch(data); ok {
		return recs, nil
	}
	if rec, ok := decodePlainAuditRecord(data); ok {
		return []AuditRecord{rec}, nil
	}
	var probe struct {
		Version json.RawMessage `json:"v"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, err
	}
	if len(probe.Version) == 0 {
		var rec AuditRecord
		if err := json.Unmarshal(data, &rec); err != nil {
			return nil, err
		}
		return []AuditRecord{rec}, nil
	}
	if v, err := strconv.Atoi(string(probe.Version)); err != nil || v != AuditBatchVersion {
		return nil, fmt.Errorf("audit message version %s: this reader knows versions 1 (a record, no \"v\") and %d (a batch): upgrade it",
			probe.Version, AuditBatchVersion)
	}
	var batch AuditBatch
	if err := json.Unmarshal(data, &batch); err != nil {
		return nil, err
	}
	return batch.Records, nil
}

// decodePlainAuditBatch reads an audit batch as json.Unmarshal does when
// data is the plain encoding AppendAuditBatch writes: "v" first (so that a
// version 1 record is told apart at the first key), then "task" and
// "records" once each.
func decodePlainAuditBatch(data []byte) (recs []AuditRecord, ok bool) {
	r := plainReader{data: data}
	n := 0
	r.members(func(key []byte) {
		n++
		switch {
		case n == 1 && string(key) == "v":
			if r.int(strconv.IntSize) != AuditBatchVersion {
				r.bad = true
			}
		case n == 2 && string(key) == "task":
			r.str()
		case n == 3 && string(key) == "records" && r.eat('['):
			// Each record of the plain encoding starts with its id: as
			// many as that key appears, or a few more where a record's
			// details hold it, so the list is made once.
			recs = make([]AuditRecord, 0, bytes.Count(r.data[r.pos:], []byte(`{"id":`)))
			r.space()
			if r.eat(']') {
				return
			}
			prev := &AuditRecord{}
			for !r.bad {
				in := plainReader{data: r.data, pos: r.pos}
				rec := in.auditRecord(prev)
				if in.bad || !in.closed {
					r.bad = true
					return
				}
				recs = append(recs, rec)
				prev = &recs[len(recs)-1]
				r.pos = in.pos
				r.space()
				if r.eat(']') {
					return
				}
				if !r.eat(',') {
					r.bad = true
					return
				}
				r.space()
			}
		default:
			r.bad = true
		}
	})
	if n != 3 || !r.end() {
		return nil, false
	}
	return recs, true
}
