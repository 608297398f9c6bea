package schemas

import (
	"encoding/json"
	"strconv"
)

// The reports and leases AX's executors write, encoded and decoded without
// reflection: an executor encodes a lease and a final report per attempt,
// the dispatcher decodes both, and encoding/json's reflection (and the
// stack an attempt's goroutine grows for it) was a tenth of a burst's CPU.
// Each reads and writes exactly what encoding/json does (fuzz-checked
// against it), and hands anything it does not take to encoding/json.

// MarshalReport encodes rep as json.Marshal does, byte for byte, without
// its reflection when rep is plain: strings and an output that encode as
// they are, and no progress. Any other rep is encoded by json.Marshal.
func MarshalReport(rep Report) ([]byte, error) {
	if b, ok := appendPlainReport(make([]byte, 0, 256), &rep); ok {
		return b, nil
	}
	return json.Marshal(rep)
}

func appendPlainReport(b []byte, rep *Report) ([]byte, bool) {
	if rep.Progress != nil || !plainRaw(rep.Output) {
		return nil, false
	}
	w := plainWriter{b: b, ok: true}
	w.int(`{"instance_id":`, rep.InstanceID)
	w.int(`,"attempt":`, int64(rep.Attempt))
	w.str(`,"worker_id":`, rep.WorkerID)
	w.str(`,"kind":`, string(rep.Kind))
	w.time(`,"at":`, rep.At)
	w.time(`,"started_at":`, rep.StartedAt)
	if len(rep.Output) > 0 {
		w.b = append(append(w.b, `,"output":`...), rep.Output...)
	}
	if rep.Error != "" {
		w.str(`,"error":`, rep.Error)
	}
	if rep.Permanent {
		w.b = append(w.b, `,"permanent":true`...)
	}
	if rep.RetryAfterMS != 0 {
		w.int(`,"retry_after_ms":`, rep.RetryAfterMS)
	}
	if rep.Traceparent != "" {
		w.str(`,"traceparent":`, rep.Traceparent)
	}
	w.b = append(w.b, '}')
	return w.b, w.ok
}

// DecodeReport decodes a report's body as json.Unmarshal does, without
// its reflection for the plain encoding executors write (no progress);
// any other body is decoded by json.Unmarshal itself.
func DecodeReport(data []byte) (Report, error) {
	return decodePlainOr(data, decodePlainReport)
}

func decodePlainReport(data []byte) (Report, bool) {
	r := plainReader{data: data}
	rep := r.report("")
	if !r.end() {
		return Report{}, false
	}
	return rep, true
}

// report reads a report object from the reader's position. A worker id
// equal to worker is that string, not a copy (a batch's reports come from
// one worker), and a kind of the known ones is its constant.
func (r *plainReader) report(worker string) (rep Report) {
	r.members(func(key []byte) {
		switch string(key) {
		case "instance_id":
			rep.InstanceID = r.int(64)
		case "attempt":
			rep.Attempt = int(r.int(strconv.IntSize))
		case "worker_id":
			rep.WorkerID = r.strAs(worker)
		case "kind":
			rep.Kind = r.reportKind()
		case "at":
			rep.At = r.time()
		case "started_at":
			rep.StartedAt = r.time()
		case "output":
			rep.Output = r.rawOrNull()
		case "error":
			rep.Error = r.str()
		case "permanent":
			rep.Permanent = r.boolean()
		case "retry_after_ms":
			rep.RetryAfterMS = r.int(64)
		case "traceparent":
			rep.Traceparent = r.str()
		default: // progress, or a key encoding/json matches otherwise
			r.bad = true
		}
	})
	return rep
}

// DecodeReportBatch decodes a report batch's body as json.Unmarshal does,
// without its reflection when every report in it is plain (see
// [DecodeReport]); any other body is decoded by json.Unmarshal itself.
func DecodeReportBatch(data []byte) (ReportBatch, error) {
	return decodePlainOr(data, decodePlainReportBatch)
}

func decodePlainReportBatch(data []byte) (b ReportBatch, ok bool) {
	r := plainReader{data: data}
	seen := false
	r.members(func(key []byte) {
		// A second "reports" would be decoded by encoding/json into the
		// reports of the first: not plain.
		if string(key) != "reports" || seen || !r.eat('[') {
			r.bad = true
			return
		}
		seen = true
		b.Reports = []Report{}
		r.space()
		if r.eat(']') {
			return
		}
		for !r.bad {
			in := plainReader{data: r.data, pos: r.pos}
			worker := ""
			if n := len(b.Reports); n > 0 {
				worker = b.Reports[n-1].WorkerID
			}
			rep := in.report(worker)
			if in.bad || !in.closed {
				r.bad = true
				return
			}
			b.Reports = append(b.Reports, rep)
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
	})
	if !r.end() {
		return ReportBatch{}, false
	}
	return b, true
}

// MarshalLease encodes l as json.Marshal does, byte for byte, without its
// reflection when its worker id encodes as it is; any other l is encoded
// by json.Marshal.
func MarshalLease(l Lease) ([]byte, error) {
	w := plainWriter{b: make([]byte, 0, 128), ok: true}
	w.int(`{"instance_id":`, l.InstanceID)
	w.int(`,"attempt":`, int64(l.Attempt))
	w.str(`,"worker_id":`, l.WorkerID)
	w.time(`,"acquired_at":`, l.AcquiredAt)
	w.b = append(w.b, '}')
	if !w.ok {
		return json.Marshal(l)
	}
	return w.b, nil
}

// DecodeLease decodes a lease's value as json.Unmarshal does, without its
// reflection for the plain encoding executors write; any other value is
// decoded by json.Unmarshal itself.
func DecodeLease(data []byte) (Lease, error) {
	return decodePlainOr(data, decodePlainLease)
}

// DecodeLeaseFrom decodes a lease's value as DecodeLease does; a worker id
// equal to worker is that string, not a copy (the leases a watch sees come
// in runs of one worker's).
func DecodeLeaseFrom(data []byte, worker string) (Lease, error) {
	return decodePlainOr(data, func(data []byte) (Lease, bool) { return decodePlainLeaseFrom(data, worker) })
}

func decodePlainLease(data []byte) (Lease, bool) { return decodePlainLeaseFrom(data, "") }

func decodePlainLeaseFrom(data []byte, worker string) (l Lease, ok bool) {
	r := plainReader{data: data}
	r.members(func(key []byte) {
		switch string(key) {
		case "instance_id":
			l.InstanceID = r.int(64)
		case "attempt":
			l.Attempt = int(r.int(strconv.IntSize))
		case "worker_id":
			l.WorkerID = r.strAs(worker)
		case "acquired_at":
			l.AcquiredAt = r.time()
		default:
			r.bad = true
		}
	})
	if !r.end() {
		return Lease{}, false
	}
	return l, true
}

// reportKind reads a report's kind: one of the known kinds is its
// constant, any other a string of its own.
func (r *plainReader) reportKind() ReportKind {
	return knownString(r, ReportSucceeded, ReportStarted, ReportFailed, ReportReleased, ReportProgress)
}
