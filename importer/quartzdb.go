package importer

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ax-scheduler/ax/schemas"
)

// QuartzOptions says how [Quartz] reads a Quartz JDBC job store.
type QuartzOptions struct {
	// Scheduler is the SCHED_NAME to read; empty reads every scheduler's.
	Scheduler string
	// TablePrefix is the job store's org.quartz.jobStore.tablePrefix;
	// default "qrtz_".
	TablePrefix string
	// Timezone is the zone of cron triggers without TIME_ZONE_ID (the
	// JVM's); empty is UTC.
	Timezone string
	// Timeout is every task's execution timeout (Quartz has none);
	// default [DefaultImportTimeout].
	Timeout time.Duration
}

// quartzTrigger is one row of qrtz_triggers with its kind's row.
type quartzTrigger struct {
	name, group, kind, state, cron, zone string
	start, end, repeat, interval         int64
	misfire                              int
	calendar                             string
	data                                 []byte
}

// quartzJob is one row of qrtz_job_details with its triggers.
type quartzJob struct {
	sched, name, group, desc, class string
	nonConcurrent                   bool
	data                            []byte
	triggers                        []quartzTrigger
}

var tablePrefix = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,40}$`)

// Quartz reads the jobs of a Quartz JDBC job store (qrtz_job_details,
// qrtz_triggers, qrtz_cron_triggers, qrtz_simple_triggers) and makes one
// task of each job, "quartz-<group>-<name>", its handler the job's class
// name: each cron trigger by Quartz's rules in its zone, each simple
// trigger that repeats forever at whole seconds as "@every", misfire
// instructions as misfire policies, paused triggers as a disabled task,
// @DisallowConcurrentExecution as one run at a time, and the job data
// map (the job's, then the trigger's over it) as the payload when the
// store keeps it as properties (org.quartz.jobStore.useProperties=true);
// a Java-serialized map is refused with the reason.
func Quartz(ctx context.Context, db *sql.DB, opts QuartzOptions) (*Report, error) {
	if opts.TablePrefix == "" {
		opts.TablePrefix = "qrtz_"
	}
	if !tablePrefix.MatchString(opts.TablePrefix) {
		return nil, fmt.Errorf("table prefix %q: letters, digits and '_' only", opts.TablePrefix)
	}
	if opts.Timeout == 0 {
		opts.Timeout = DefaultImportTimeout
	}
	jobs, err := readQuartz(ctx, db, opts)
	if err != nil {
		return nil, err
	}
	rep := &Report{}
	for _, j := range jobs {
		rep.Entries = append(rep.Entries, finish(quartzEntry(j, opts)))
	}
	return rep, nil
}

func quartzEntry(j quartzJob, opts QuartzOptions) Entry {
	e := Entry{Source: fmt.Sprintf("%sjob_details %s.%s", opts.TablePrefix, j.group, j.name), Text: j.class}
	refuse := func(msg string) Entry { e.Notes = []string{msg}; return e }
	if !handlerName.MatchString(j.class) {
		return refuse(fmt.Sprintf("its job class %q is not a handler name AX accepts (letters, digits, '.', '_' and '-')", j.class))
	}
	jobData, err := quartzDataMap(j.data)
	if err != nil {
		return refuse("its job data map: " + err.Error())
	}
	t := &schemas.Task{TaskName: quartzTaskName(j), TaskType: "quartz", Description: j.desc,
		Execution: schemas.Execution{Handler: j.class, Timeout: schemas.Duration(opts.Timeout.String())}}
	if j.nonConcurrent {
		t.Concurrency = schemas.Concurrency{MaxRunningInstances: 1, BlockingStrategy: schemas.BlockSerial}
	}
	paused := 0
	var texts []string
	for _, tr := range j.triggers {
		src := tr.group + "." + tr.name
		if tr.calendar != "" {
			return refuse(fmt.Sprintf("trigger %s excludes the days of calendar %q, which AX cannot read", src, tr.calendar))
		}
		data, err := quartzDataMap(tr.data)
		if err != nil {
			return refuse("trigger " + src + "'s data map: " + err.Error())
		}
		merged := map[string]string{}
		for k, v := range jobData {
			merged[k] = v
		}
		for k, v := range data {
			merged[k] = v
		}
		var payload json.RawMessage
		if len(merged) > 0 {
			payload, _ = json.Marshal(merged)
		}
		axTr := schemas.Trigger{Type: schemas.TriggerTypeCron, Payload: payload}
		switch tr.kind {
		case "CRON":
			sched, err := QuartzCron(tr.cron)
			if err != nil {
				return refuse("trigger " + src + " " + strconv.Quote(tr.cron) + ": " + err.Error())
			}
			axTr.Schedule, axTr.Timezone = sched, tr.zone
			if axTr.Timezone == "" {
				axTr.Timezone = opts.Timezone
			}
			texts = append(texts, fmt.Sprintf("%s: cron %s (%s)", src, tr.cron, axTr.Timezone))
			switch tr.misfire {
			case 0, 1: // smart policy (FIRE_ONCE_NOW for cron), FIRE_ONCE_NOW
				axTr.Misfire = schemas.MisfireFireOnce
			case 2: // DO_NOTHING
				axTr.Misfire = schemas.MisfireSkip
			case -1: // IGNORE_MISFIRE_POLICY: every missed tick
				axTr.Misfire, axTr.MaxCatchUp = schemas.MisfireCatchUp, schemas.MaxMaxCatchUp
				e.Notes = append(e.Notes, fmt.Sprintf("trigger %s ignores misfires (fires every missed tick); AX catches up the latest %d", src, schemas.MaxMaxCatchUp))
			default:
				e.Notes = append(e.Notes, fmt.Sprintf("trigger %s: misfire instruction %d is unknown: missed ticks are skipped", src, tr.misfire))
			}
		case "SIMPLE":
			texts = append(texts, fmt.Sprintf("%s: every %dms, repeat %d, from %d", src, tr.interval, tr.repeat, tr.start))
			if tr.repeat != -1 {
				return refuse(fmt.Sprintf("trigger %s fires %d times and stops; AX's triggers repeat forever: fire it with ax fire --run-at, or define the task by hand", src, tr.repeat+1))
			}
			if tr.interval < 1000 || tr.interval%1000 != 0 {
				return refuse(fmt.Sprintf("trigger %s repeats every %dms; AX's @every takes whole seconds", src, tr.interval))
			}
			axTr.Schedule = fmt.Sprintf("@every %ds", tr.interval/1000)
			if tr.start%tr.interval != 0 {
				e.Notes = append(e.Notes, fmt.Sprintf("trigger %s counts its %ds from its start time; AX's @every ticks at the multiples of %ds since 1970-01-01 UTC: same rate, other phase", src, tr.interval/1000, tr.interval/1000))
			}
			switch tr.misfire {
			case 0, 4, 5: // smart (repeat forever: RESCHEDULE_NEXT_WITH_REMAINING_COUNT), NEXT_WITH_*
				axTr.Misfire = schemas.MisfireSkip
			case 1, 2, 3: // FIRE_NOW, RESCHEDULE_NOW_WITH_*
				axTr.Misfire = schemas.MisfireFireOnce
				e.Notes = append(e.Notes, fmt.Sprintf("trigger %s reschedules from the misfired run; AX fires it once and keeps its ticks", src))
			case -1:
				axTr.Misfire, axTr.MaxCatchUp = schemas.MisfireCatchUp, schemas.MaxMaxCatchUp
			}
		default:
			return refuse(fmt.Sprintf("trigger %s is a %s trigger; AX imports CRON and SIMPLE triggers", src, tr.kind))
		}
		if tr.end > 0 {
			e.Notes = append(e.Notes, fmt.Sprintf("trigger %s ends at %s; AX's trigger does not: disable the task then", src, time.UnixMilli(tr.end).UTC().Format(time.RFC3339)))
		}
		if tr.state == "PAUSED" || tr.state == "PAUSED_BLOCKED" {
			paused++
		}
		t.Triggers = append(t.Triggers, axTr)
	}
	switch {
	case len(j.triggers) == 0:
		e.Notes = append(e.Notes, "no trigger: fired by hand only")
	case paused == len(j.triggers):
		e.Disabled = true
	case paused > 0:
		e.Notes = append(e.Notes, fmt.Sprintf("%d of its %d triggers are paused; AX pauses a task, not a trigger: the task is applied enabled", paused, len(j.triggers)))
	}
	e.Text = j.class + "\n" + strings.Join(texts, "\n")
	e.Task = t
	return e
}

// quartzTaskName is "quartz-<group>-<name>", with a hash of both when
// that is too long or loses characters.
func quartzTaskName(j quartzJob) string {
	name := "quartz-" + slug(j.group, 64) + "-" + slug(j.name, 64)
	if len(name) <= 64 && slug(j.group, 64) != "" && slug(j.name, 64) != "" {
		return name
	}
	sum := sha256.Sum256([]byte(j.sched + "\x00" + j.group + "\x00" + j.name))
	return "quartz-" + slug(j.name, 48) + "-" + hex.EncodeToString(sum[:])[:6]
}

// javaSerialMagic opens a Java-serialized object (ObjectOutputStream).
var javaSerialMagic = []byte{0xAC, 0xED}

// quartzDataMap reads a JOB_DATA column: empty, or a java.util.Properties
// text as Quartz writes it with useProperties=true. A Java-serialized
// JobDataMap is refused: its values may be any Java objects.
func quartzDataMap(b []byte) (map[string]string, error) {
	if len(b) == 0 {
		return nil, nil
	}
	if bytes.HasPrefix(b, javaSerialMagic) {
		return nil, fmt.Errorf("it is a Java-serialized JobDataMap, whose values may be any Java objects; set org.quartz.jobStore.useProperties=true (string values only) and store the jobs again, or give the data to the task by hand")
	}
	return parseProperties(string(b))
}

// parseProperties reads java.util.Properties' text format (as
// Properties.store writes it): # and ! comments, key=value, key:value
// or key value, backslash escapes and \uXXXX, continued lines.
func parseProperties(text string) (map[string]string, error) {
	if !utf8.ValidString(text) {
		// Properties.store writes ISO 8859-1.
		r := make([]rune, len(text))
		for i := 0; i < len(text); i++ {
			r[i] = rune(text[i])
		}
		text = string(r)
	}
	out := map[string]string{}
	lines := strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n")
	for i := 0; i < len(lines); i++ {
		line := strings.TrimLeft(lines[i], " \t\f")
		if line == "" || line[0] == '#' || line[0] == '!' {
			continue
		}
		for strings.HasSuffix(line, "\\") && !strings.HasSuffix(line, "\\\\") && i+1 < len(lines) {
			i++
			line = line[:len(line)-1] + strings.TrimLeft(lines[i], " \t\f")
		}
		key, val, err := splitProperty(line)
		if err != nil {
			return nil, err
		}
		out[key] = val
	}
	return out, nil
}

// splitProperty cuts one logical line into its unescaped key and value.
func splitProperty(line string) (string, string, error) {
	var key strings.Builder
	i := 0
	for i < len(line) {
		c := line[i]
		if c == '\\' && i+1 < len(line) {
			r, n, err := unescape(line[i:])
			if err != nil {
				return "", "", err
			}
			key.WriteRune(r)
			i += n
			continue
		}
		if c == '=' || c == ':' || c == ' ' || c == '\t' || c == '\f' {
			break
		}
		key.WriteByte(c)
		i++
	}
	rest := strings.TrimLeft(line[i:], " \t\f")
	if rest != "" && (rest[0] == '=' || rest[0] == ':') {
		rest = strings.TrimLeft(rest[1:], " \t\f")
	}
	var val strings.Builder
	for j := 0; j < len(rest); {
		if rest[j] == '\\' && j+1 < len(rest) {
			r, n, err := unescape(rest[j:])
			if err != nil {
				return "", "", err
			}
			val.WriteRune(r)
			j += n
			continue
		}
		val.WriteByte(rest[j])
		j++
	}
	return key.String(), val.String(), nil
}

// unescape reads one backslash escape at the start of s.
func unescape(s string) (rune, int, error) {
	switch c := s[1]; c {
	case 't':
		return '\t', 2, nil
	case 'n':
		return '\n', 2, nil
	case 'r':
		return '\r', 2, nil
	case 'f':
		return '\f', 2, nil
	case 'u':
		if len(s) < 6 {
			return 0, 0, fmt.Errorf("properties: %q is a cut \\u escape", s)
		}
		n, err := strconv.ParseUint(s[2:6], 16, 16)
		if err != nil {
			return 0, 0, fmt.Errorf("properties: %q is not a \\uXXXX escape", s[:6])
		}
		return rune(n), 6, nil
	default:
		return rune(c), 2, nil
	}
}

// readQuartz reads the jobs and their triggers, by group and name.
func readQuartz(ctx context.Context, db *sql.DB, opts QuartzOptions) ([]quartzJob, error) {
	p := opts.TablePrefix
	rows, err := db.QueryContext(ctx, `SELECT sched_name, job_name, job_group, COALESCE(description, ''), job_class_name, is_nonconcurrent, job_data
		FROM `+p+`job_details ORDER BY sched_name, job_group, job_name`)
	if err != nil {
		return nil, fmt.Errorf("read %sjob_details: %w", p, err)
	}
	var jobs []quartzJob
	index := map[string]int{}
	for rows.Next() {
		var j quartzJob
		if err := rows.Scan(&j.sched, &j.name, &j.group, &j.desc, &j.class, &j.nonConcurrent, &j.data); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read %sjob_details: %w", p, err)
		}
		if opts.Scheduler != "" && j.sched != opts.Scheduler {
			continue
		}
		index[j.sched+"\x00"+j.group+"\x00"+j.name] = len(jobs)
		jobs = append(jobs, j)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read %sjob_details: %w", p, err)
	}
	rows, err = db.QueryContext(ctx, `SELECT t.sched_name, t.job_group, t.job_name, t.trigger_name, t.trigger_group, t.trigger_type, t.trigger_state,
		t.start_time, COALESCE(t.end_time, 0), COALESCE(t.misfire_instr, 0), COALESCE(t.calendar_name, ''), t.job_data,
		COALESCE(c.cron_expression, ''), COALESCE(c.time_zone_id, ''), COALESCE(s.repeat_count, 0), COALESCE(s.repeat_interval, 0)
		FROM `+p+`triggers t
		LEFT JOIN `+p+`cron_triggers c ON c.sched_name = t.sched_name AND c.trigger_name = t.trigger_name AND c.trigger_group = t.trigger_group
		LEFT JOIN `+p+`simple_triggers s ON s.sched_name = t.sched_name AND s.trigger_name = t.trigger_name AND s.trigger_group = t.trigger_group
		ORDER BY t.trigger_group, t.trigger_name`)
	if err != nil {
		return nil, fmt.Errorf("read %striggers: %w", p, err)
	}
	defer rows.Close()
	for rows.Next() {
		var sched, group, name string
		var tr quartzTrigger
		if err := rows.Scan(&sched, &group, &name, &tr.name, &tr.group, &tr.kind, &tr.state, &tr.start, &tr.end, &tr.misfire,
			&tr.calendar, &tr.data, &tr.cron, &tr.zone, &tr.repeat, &tr.interval); err != nil {
			return nil, fmt.Errorf("read %striggers: %w", p, err)
		}
		if i, ok := index[sched+"\x00"+group+"\x00"+name]; ok {
			jobs[i].triggers = append(jobs[i].triggers, tr)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read %striggers: %w", p, err)
	}
	sort.SliceStable(jobs, func(a, b int) bool { return jobs[a].group+"."+jobs[a].name < jobs[b].group+"."+jobs[b].name })
	return jobs, nil
}
