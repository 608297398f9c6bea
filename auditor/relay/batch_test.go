package relay

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
)

// TestMessagesOfAPage: a page's records become one message a task, the
// tasks in the order of their first record, each task's records in the
// page's order, split where they exceed maxBatchBytes; every message names
// the page's last record and its part k/n, and carries its last record's
// id. Version 1 makes a message a record.
func TestMessagesOfAPage(t *testing.T) {
	t.Parallel()
	top := streams.Default()
	big := strings.Repeat("x", 40<<10)
	var recs []schemas.AuditRecord
	for i := range 30 {
		task, reason := "etl", ""
		if i%3 == 1 {
			task = "mail"
		}
		if task == "etl" && i >= 10 {
			reason = big // 13 records of 40 KiB: two messages of etl
		}
		recs = append(recs, schemas.AuditRecord{ID: schemas.TransitionAuditID(int64(i + 1)), Kind: schemas.AuditTransition,
			Task: task, InstanceID: int64(i), To: schemas.StateSucceeded, Attempt: 1, Operator: "worker:w", Reason: reason,
			At: time.Unix(int64(i), 0).UTC()})
	}
	s := &Service{opts: Options{Version: 2}, top: top}
	msgs, err := s.messages(recs)
	if err != nil {
		t.Fatal(err)
	}
	var tasks []string
	byTask := map[string][]string{}
	for k, m := range msgs {
		got, err := schemas.DecodeAuditMessage(m.data)
		if err != nil {
			t.Fatal(err)
		}
		task := got[0].Task
		tasks = append(tasks, task)
		if m.subject != top.Audit(task) || m.id != got[len(got)-1].ID || m.records != len(got) ||
			m.page != "t-30" || m.part != fmt.Sprintf("%d/%d", k+1, len(msgs)) {
			t.Errorf("message %d: subject %s id %s page %s part %s, %d records of %s", k, m.subject, m.id, m.page, m.part, len(got), task)
		}
		if len(m.data) > maxBatchBytes+len(big)+1024 {
			t.Errorf("message %d holds %d bytes", k, len(m.data))
		}
		for _, r := range got {
			if r.Task != task {
				t.Errorf("message %d of %s holds a record of %s", k, task, r.Task)
			}
			byTask[task] = append(byTask[task], r.ID)
		}
	}
	if strings.Join(tasks, ",") != "etl,etl,mail" {
		t.Errorf("messages of %v, want etl (split in two by size), then mail", tasks)
	}
	for task, ids := range byTask {
		var want []string
		for _, r := range recs {
			if r.Task == task {
				want = append(want, r.ID)
			}
		}
		if strings.Join(ids, ",") != strings.Join(want, ",") {
			t.Errorf("%s's records came as %v, want %v", task, ids, want)
		}
	}
	s.opts.Version = 1
	if msgs, err = s.messages(recs); err != nil || len(msgs) != len(recs) || msgs[3].id != "t-4" || msgs[3].part != "" {
		t.Errorf("version 1: %d messages, %v; want one a record without parts", len(msgs), err)
	}
	for _, bad := range []string{"", "1", "0/2", "3/2", "a/b", "2/x"} {
		if _, _, ok := parsePart(bad); ok {
			t.Errorf("parsePart(%q) took it", bad)
		}
	}
}
