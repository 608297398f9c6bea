// Package importer turns the jobs of another scheduler into AX task
// definitions: the lines of a crontab ([Crontab]) and the jobs of an
// XXL-JOB admin database ([XXLJob]). Each source row becomes one
// [Entry] of a [Report]: imported as it was, changed (imported, with a
// note for each thing AX does differently), or refused with the reason.
//
// A schedule is translated field by field into AX's cron (robfig/cron's
// 5 or 6 fields read by schemas/taskdef), keeping the source's rules
// where the two differ: crontab's day-of-month/day-of-week rule (both
// restricted means either; one starting with * means both), Sunday as 7,
// Quartz's day-of-week numbers (1 is Sunday) and its '?'. What AX's cron
// cannot say (Quartz's L, W, # and years, crontab's @reboot) is refused,
// never approximated.
//
// The importer reads and translates; it writes nothing. cmd/ax writes the
// definitions to files for review or applies them through the API.
package importer
