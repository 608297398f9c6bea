package executor

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
)

// The spool (Options.SpoolDir) keeps the final reports that JetStream did
// not store at the first try: one file per attempt, written (and synced)
// after that try failed and removed once the report is stored. A report
// stored at the first try never touches the disk, so the spool costs
// nothing while JetStream takes writes. At start the worker sends what a
// run before it left there, each report alone on its attempt's own
// subject with the message id it had (see spooledReport), tried until
// stored like any final report; the dispatcher applies it if the attempt
// is still the instance's current one, and refuses it as stale otherwise
// (a worker that came back after the reaper's outage grace: its attempt
// ran again).

// spoolExt ends the name of a spooled report's file.
const spoolExt = ".report"

// spooledReport is a final report as the spool keeps it: the message of
// the report alone, whatever form (alone or in a batch) it was tried in.
type spooledReport struct {
	Subject string          `json:"subject"`
	MsgID   string          `json:"msg_id"`
	Report  json.RawMessage `json:"report"`
}

// spoolPath is the file of the final report of d in the spool.
func (r *reporter) spoolPath(d *schemas.Dispatch) string {
	return filepath.Join(r.spoolDir, strconv.FormatInt(d.InstanceID, 10)+"-"+strconv.Itoa(d.Attempt)+spoolExt)
}

// spool writes the final report of d (of kind, encoded as data) to the
// spool, if the worker has one, and returns its file ("" when not
// spooled). A spool that cannot be written is logged: the report is still
// tried until stored, it only does not outlive a restart.
func (r *reporter) spool(d *schemas.Dispatch, kind schemas.ReportKind, data []byte) string {
	if r.spoolDir == "" {
		return ""
	}
	m := r.reportMsg(d, kind, data, "")
	b, err := json.Marshal(spooledReport{Subject: m.Subject, MsgID: m.Header.Get(streams.HeaderMsgID), Report: data})
	if err == nil {
		err = writeSynced(r.spoolPath(d), b)
	}
	if err != nil {
		r.log.Error("spool a final report JetStream refused; it is kept in memory only", "error", err, "instance_id", d.InstanceID, "attempt", d.Attempt, "spool", r.spoolDir)
		return ""
	}
	return r.spoolPath(d)
}

// unspool removes the spooled file of a report now stored.
func (r *reporter) unspool(path string) {
	if path == "" {
		return
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		r.log.Warn("remove a stored final report from the spool; a restart sends it again, as a duplicate the dispatcher ignores", "error", err, "file", path)
	}
}

// writeSynced writes data to path through a synced temporary file and a
// rename, so that the file is whole or absent after a crash.
func writeSynced(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

// sendSpooled sends the final reports a run before this one left in the
// spool, each until it is stored or ctx (the worker's background work)
// or the reports' tries end; what is not stored stays in the spool.
func (r *reporter) sendSpooled(ctx context.Context) {
	if r.spoolDir == "" {
		return
	}
	entries, err := os.ReadDir(r.spoolDir)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			r.log.Error("read the spool of final reports", "error", err, "spool", r.spoolDir)
		}
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(r.ctx, cancel)()
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), spoolExt) {
			continue
		}
		path := filepath.Join(r.spoolDir, e.Name())
		b, err := os.ReadFile(path)
		var rep spooledReport
		if err == nil {
			err = json.Unmarshal(b, &rep)
		}
		if err != nil || rep.Subject == "" {
			r.log.Error("a spooled final report cannot be read; leaving it", "error", err, "file", path)
			continue
		}
		m := nats.NewMsg(rep.Subject)
		m.Data = rep.Report
		m.Header.Set(streams.HeaderMsgID, rep.MsgID)
		if err := r.publishRetry(ctx, m, nil); err != nil {
			r.log.Warn("send a spooled final report; it stays in the spool", "error", err, "file", path)
			if ctx.Err() != nil {
				return
			}
			continue
		}
		r.log.Info("sent a final report from the spool", "subject", rep.Subject)
		r.unspool(path)
	}
}
