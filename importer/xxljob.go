package importer

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/ax-scheduler/ax/schemas"
)

// OpenMySQL opens a MySQL or MariaDB database named by a URL,
// mysql://user:password@host:port/database (port 3306 by default), read
// in UTC.
func OpenMySQL(dsn string) (*sql.DB, error) {
	u, err := url.Parse(dsn)
	if err != nil || u.Scheme != "mysql" || u.Host == "" || strings.Trim(u.Path, "/") == "" {
		return nil, fmt.Errorf("--dsn %q: want mysql://user:password@host:port/database", redactURL(dsn))
	}
	c := mysql.NewConfig()
	c.User = u.User.Username()
	c.Passwd, _ = u.User.Password()
	c.Net, c.Addr = "tcp", u.Host
	if u.Port() == "" {
		c.Addr += ":3306"
	}
	c.DBName = strings.Trim(u.Path, "/")
	c.ParseTime = true
	c.Loc = time.UTC
	c.Timeout = 10 * time.Second
	conn, err := mysql.NewConnector(c)
	if err != nil {
		return nil, fmt.Errorf("--dsn %s: %w", redactURL(dsn), err)
	}
	return sql.OpenDB(conn), nil
}

// redactURL hides a URL's password.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}

// XXLJobOptions says how [XXLJob] reads an XXL-JOB admin database.
type XXLJobOptions struct {
	// Timezone is the zone XXL-JOB's admin ran in (the JVM's): its cron
	// expressions are read in it. Empty is UTC.
	Timezone string
	// Timeout is the timeout of jobs whose executor_timeout is 0 (none);
	// default [DefaultImportTimeout].
	Timeout time.Duration
}

// StoppedXXLJobType is the task type of a job imported from XXL-JOB
// where it was stopped (trigger_status 0): it is applied disabled, and ax
// shadow's --imported leaves it so at the cut-over.
const StoppedXXLJobType = "xxl-job-stopped"

// xxlJob is one row of xxl_job_info with its group's app_name.
type xxlJob struct {
	id, group                           int64
	name, author, email                 string
	schedType, schedConf, misfire       string
	route, handler, param, block        string
	timeout, retries                    int64
	glue, children, appName, groupTitle string
	running                             bool
}

// handlerName is what AX's execution.handler accepts.
var handlerName = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

// XXLJob reads the jobs of an XXL-JOB admin database (xxl_job_info, each
// with its executor group from xxl_job_group; the schema of XXL-JOB 2.3
// and later, and of older ones with job_cron and job_desc) and makes one
// task of each, by id. See docs/migrate.md for the mapping; each thing
// AX does differently is a note of its entry, and GLUE jobs, whose code
// lives in XXL-JOB's database, are refused.
func XXLJob(ctx context.Context, db *sql.DB, opts XXLJobOptions) (*Report, error) {
	if opts.Timeout == 0 {
		opts.Timeout = DefaultImportTimeout
	}
	jobs, err := readXXLJobs(ctx, db)
	if err != nil {
		return nil, err
	}
	names := make(map[int64]string, len(jobs))
	for _, j := range jobs {
		names[j.id] = xxlTaskName(j)
	}
	parents := map[int64][]int64{}
	for _, j := range jobs {
		for _, c := range strings.Split(j.children, ",") {
			if id, err := strconv.ParseInt(strings.TrimSpace(c), 10, 64); err == nil {
				parents[id] = append(parents[id], j.id)
			}
		}
	}
	rep := &Report{}
	for _, j := range jobs {
		rep.Entries = append(rep.Entries, finish(xxlEntry(j, names, parents[j.id], opts)))
	}
	if opts.Timezone == "" {
		rep.Notes = append(rep.Notes, "cron expressions are read in UTC: pass the zone XXL-JOB's admin ran in (--timezone) if it was another")
	}
	return rep, nil
}

func xxlTaskName(j xxlJob) string {
	base := j.handler
	if base == "" {
		base = j.name
	}
	name := "xxl-" + strconv.FormatInt(j.id, 10)
	if s := slug(base, 64-len(name)-1); s != "" {
		name += "-" + s
	}
	return name
}

// xxlEntry maps one job.
func xxlEntry(j xxlJob, names map[int64]string, parents []int64, opts XXLJobOptions) Entry {
	e := Entry{Source: fmt.Sprintf("xxl_job_info id=%d", j.id), Text: fmt.Sprintf("%s: %s %s, handler %s, route %s, block %s",
		j.name, j.schedType, j.schedConf, j.handler, j.route, j.block), Disabled: !j.running}
	refuse := func(msg string) Entry { e.Notes = []string{msg}; return e }
	if j.glue != "" && j.glue != "BEAN" {
		return refuse(fmt.Sprintf("a %s job keeps its code in XXL-JOB's database and runs it inside XXL-JOB's executor; AX runs handlers your executors register: port the code to a handler (a GLUE_SHELL script can run with builtin.shell) and define the task by hand", j.glue))
	}
	if !handlerName.MatchString(j.handler) {
		return refuse(fmt.Sprintf("its executor_handler %q is not a handler name AX accepts (letters, digits, '.', '_' and '-')", j.handler))
	}
	t := &schemas.Task{
		TaskName:    names[j.id],
		TaskType:    "xxl-job",
		Description: j.name,
		Owner:       strings.TrimSpace(j.author),
		Execution:   schemas.Execution{Handler: j.handler},
	}
	if j.email != "" {
		t.Owner = strings.TrimSpace(strings.TrimSpace(j.author) + " <" + j.email + ">")
	}
	var payload json.RawMessage
	if j.param != "" {
		payload, _ = json.Marshal(j.param)
	}
	// Schedule.
	misfire := schemas.MisfireSkip
	switch j.misfire {
	case "", "DO_NOTHING":
	case "FIRE_ONCE_NOW":
		misfire = schemas.MisfireFireOnce
	default:
		e.Notes = append(e.Notes, fmt.Sprintf("misfire strategy %q is unknown: missed ticks are skipped", j.misfire))
	}
	switch j.schedType {
	case "CRON":
		sched, err := QuartzCron(j.schedConf)
		if err != nil {
			return refuse("its cron " + strconv.Quote(j.schedConf) + ": " + err.Error())
		}
		t.Triggers = []schemas.Trigger{{Type: schemas.TriggerTypeCron, Schedule: sched, Timezone: opts.Timezone, Misfire: misfire, Payload: payload}}
	case "FIX_RATE":
		sec, err := strconv.Atoi(strings.TrimSpace(j.schedConf))
		if err != nil || sec < 1 {
			return refuse(fmt.Sprintf("its FIX_RATE %q is not a whole number of seconds", j.schedConf))
		}
		t.Triggers = []schemas.Trigger{{Type: schemas.TriggerTypeCron, Schedule: fmt.Sprintf("@every %ds", sec), Misfire: misfire, Payload: payload}}
		e.Notes = append(e.Notes, fmt.Sprintf("FIX_RATE %ds counts from the job's last run; AX's @every %ds ticks at the multiples of %ds since 1970-01-01 UTC: same rate, other phase", sec, sec, sec))
	case "NONE", "":
		if payload != nil {
			e.Notes = append(e.Notes, "no schedule: fired by hand or as a child; its executor_param "+strconv.Quote(j.param)+" is not kept (give it as the payload of ax fire)")
		}
	default:
		return refuse(fmt.Sprintf("schedule type %q is not one AX imports (CRON, FIX_RATE, NONE)", j.schedType))
	}
	if j.schedType == "CRON" && len(parents) > 0 {
		e.Notes = append(e.Notes, "it is both scheduled and a child job: it fires on its schedule and after its parents")
	}
	// Route strategy.
	switch j.route {
	case "", "FAILOVER", "BUSYOVER":
		// pull: a dead or busy executor does not pull.
	case "FIRST", "LAST":
		e.Notes = append(e.Notes, fmt.Sprintf("route %s sends every run to one executor by address order; AX lets the least loaded executor of the pool take it (dispatch pull)", j.route))
	case "ROUND", "RANDOM", "LEAST_FREQUENTLY_USED", "LEAST_RECENTLY_USED":
		e.Notes = append(e.Notes, fmt.Sprintf("route %s: AX lets the least loaded executor of the pool take each run (dispatch pull)", j.route))
	case "CONSISTENT_HASH":
		t.Dispatch.Strategy = schemas.DispatchHash
		t.Dispatch.HashKey = "xxl-job-" + strconv.FormatInt(j.id, 10)
	case "SHARDING_BROADCAST":
		t.Dispatch.Strategy = schemas.DispatchBroadcast
		e.Notes = append(e.Notes, "SHARDING_BROADCAST: each live executor runs one shard; the handler reads its shard from Job.ShardIndex and Job.ShardCount instead of XxlJobHelper.getShardIndex/getShardTotal")
	default:
		e.Notes = append(e.Notes, fmt.Sprintf("route %q is unknown: dispatch pull", j.route))
	}
	// Block strategy: one run at a time per job, as XXL-JOB's job thread.
	t.Concurrency.MaxRunningInstances = 1
	switch j.block {
	case "", "SERIAL_EXECUTION":
		t.Concurrency.BlockingStrategy = schemas.BlockSerial
	case "DISCARD_LATER":
		t.Concurrency.BlockingStrategy = schemas.BlockDiscard
	case "COVER_EARLY":
		t.Concurrency.BlockingStrategy = schemas.BlockCancelOther
	default:
		t.Concurrency.BlockingStrategy = schemas.BlockSerial
		e.Notes = append(e.Notes, fmt.Sprintf("block strategy %q is unknown: serial", j.block))
	}
	if t.Dispatch.Strategy == schemas.DispatchBroadcast {
		t.Concurrency = schemas.Concurrency{}
		e.Notes = append(e.Notes, "its block strategy held one run per executor; a broadcast's shards run on their own")
	}
	// Timeout and retries.
	t.Execution.Timeout = schemas.Duration(opts.Timeout.String())
	if j.timeout > 0 {
		t.Execution.Timeout = schemas.Duration(fmt.Sprintf("%ds", j.timeout))
	} else {
		e.Notes = append(e.Notes, fmt.Sprintf("executor_timeout 0 (none): AX gives it %s", opts.Timeout))
	}
	if j.retries > 0 {
		zero := 0.0
		t.Execution.Retry = schemas.Retry{MaxAttempts: int(min(j.retries+1, 100)), InitialIntervalSec: &zero}
	}
	// Executor group: the pool.
	if pool := slug(j.appName, 32); pool != "" {
		t.Dispatch.Tags = []string{pool}
	} else {
		e.Notes = append(e.Notes, fmt.Sprintf("its executor group %d is not in xxl_job_group: the pool default", j.group))
	}
	// Chains: XXL-JOB fires a child after its parent succeeded.
	for _, p := range parents {
		if names[p] == "" {
			continue
		}
		t.After = append(t.After, schemas.After{Task: names[p], On: schemas.OnSuccess})
	}
	if len(parents) > 1 {
		e.Notes = append(e.Notes, "several parents name it as a child: XXL-JOB runs it after each; AX runs it once all of them ended in a run")
	}
	if !j.running {
		// Out of ax shadow's --imported: cut-over leaves it disabled.
		t.TaskType = StoppedXXLJobType
	}
	e.Task = t
	return e
}

// readXXLJobs reads xxl_job_info joined with xxl_job_group, by id,
// whichever of XXL-JOB's schemas the database has.
func readXXLJobs(ctx context.Context, db *sql.DB) ([]xxlJob, error) {
	has := func(table, col string) (bool, error) {
		var n int
		err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.columns
			WHERE table_schema = DATABASE() AND table_name = ? AND column_name = ?`, table, col).Scan(&n)
		return n > 0, err
	}
	infoName, sched, groupName := "i.job_desc", "'CRON', i.job_cron, 'DO_NOTHING'", "g.title"
	for _, c := range []struct {
		table, col string
		set        *string
		to         string
	}{
		{"xxl_job_info", "name", &infoName, "i.name"},
		{"xxl_job_info", "schedule_type", &sched, "i.schedule_type, i.schedule_conf, i.misfire_strategy"},
		{"xxl_job_group", "name", &groupName, "g.name"},
	} {
		ok, err := has(c.table, c.col)
		if err != nil {
			return nil, fmt.Errorf("read xxl_job_info: %w", err)
		}
		if ok {
			*c.set = c.to
		}
	}
	q := `SELECT i.id, i.job_group, ` + infoName + `, COALESCE(i.author, ''), COALESCE(i.alarm_email, ''), ` + sched + `,
		COALESCE(i.executor_route_strategy, ''), COALESCE(i.executor_handler, ''), COALESCE(i.executor_param, ''),
		COALESCE(i.executor_block_strategy, ''), i.executor_timeout, i.executor_fail_retry_count, i.glue_type,
		COALESCE(i.child_jobid, ''), i.trigger_status, COALESCE(g.app_name, ''), COALESCE(` + groupName + `, '')
		FROM xxl_job_info i LEFT JOIN xxl_job_group g ON g.id = i.job_group ORDER BY i.id`
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("read xxl_job_info: %w", err)
	}
	defer rows.Close()
	var out []xxlJob
	for rows.Next() {
		var j xxlJob
		var sc sql.NullString
		if err := rows.Scan(&j.id, &j.group, &j.name, &j.author, &j.email, &j.schedType, &sc, &j.misfire,
			&j.route, &j.handler, &j.param, &j.block, &j.timeout, &j.retries, &j.glue,
			&j.children, &j.running, &j.appName, &j.groupTitle); err != nil {
			return nil, fmt.Errorf("read xxl_job_info: %w", err)
		}
		j.schedConf = sc.String
		out = append(out, j)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read xxl_job_info: %w", err)
	}
	return out, nil
}

// OpenDatabase opens a job store named by a URL: postgres://… (or
// postgresql://…) with pgx, mysql://… as [OpenMySQL] does.
func OpenDatabase(dsn string) (*sql.DB, error) {
	switch {
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		cfg, err := pgx.ParseConfig(dsn)
		if err != nil {
			return nil, fmt.Errorf("--dsn %s: %w", redactURL(dsn), err)
		}
		return stdlib.OpenDB(*cfg), nil
	case strings.HasPrefix(dsn, "mysql://"):
		return OpenMySQL(dsn)
	}
	return nil, fmt.Errorf("--dsn %q: want postgres://user:password@host:port/database or mysql://user:password@host:port/database", redactURL(dsn))
}
