-- Jobs as a Quartz scheduler with org.quartz.jobStore.useProperties=true
-- stores them (JOB_DATA: java.util.Properties.store text), one per form
-- the importer maps, and one with a Java-serialized map.
INSERT INTO qrtz_job_details VALUES
 ('S', 'nightly', 'reports', 'the nightly report', 'com.example.NightlyReport', true, true, false, false,
  convert_to(E'#\n#Sun Mar 01 10:00:00 CET 2026\nregion=eu\nowner\\ name=ann\\u00e9\n', 'UTF8')),
 ('S', 'pull', 'sync', NULL, 'com.example.Pull', true, false, false, false, convert_to(E'#\nbatch=10\nsource=crm\n', 'UTF8')),
 ('S', 'paused', 'ops', NULL, 'com.example.Paused', true, false, false, false, NULL),
 ('S', 'once', 'ops', NULL, 'com.example.Once', true, false, false, false, NULL),
 ('S', 'serial', 'ops', NULL, 'com.example.Serial', true, false, false, false, decode('aced0005737200156f72672e71756172747a2e4a6f62446174614d6170', 'hex')),
 ('S', 'month-end', 'ops', NULL, 'com.example.MonthEnd', true, false, false, false, NULL),
 ('S', 'tokyo', 'ops', NULL, 'com.example.Tokyo', true, false, false, false, NULL);
INSERT INTO qrtz_triggers (sched_name, trigger_name, trigger_group, job_name, job_group, trigger_state, trigger_type, start_time, end_time, misfire_instr, job_data) VALUES
 ('S', 'nightly-t', 'reports', 'nightly', 'reports', 'WAITING', 'CRON', 1767225600000, 0, 2, NULL),
 ('S', 'pull-t', 'sync', 'pull', 'sync', 'WAITING', 'SIMPLE', 1767225600000, 0, 0, convert_to(E'batch=50\n', 'UTF8')),
 ('S', 'paused-t', 'ops', 'paused', 'ops', 'PAUSED', 'CRON', 1767225600000, 0, 1, NULL),
 ('S', 'once-t', 'ops', 'once', 'ops', 'WAITING', 'SIMPLE', 1767225600000, 0, 0, NULL),
 ('S', 'serial-t', 'ops', 'serial', 'ops', 'WAITING', 'CRON', 1767225600000, 0, 0, NULL),
 ('S', 'month-end-t', 'ops', 'month-end', 'ops', 'WAITING', 'CRON', 1767225600000, 0, 0, NULL),
 ('S', 'tokyo-t', 'ops', 'tokyo', 'ops', 'WAITING', 'CRON', 1767225600000, 0, -1, NULL);
INSERT INTO qrtz_cron_triggers VALUES
 ('S', 'nightly-t', 'reports', '0 30 2 ? * MON-FRI', 'Europe/Berlin'),
 ('S', 'paused-t', 'ops', '0 0 * * * ?', 'UTC'),
 ('S', 'serial-t', 'ops', '0 0 1 * * ?', 'UTC'),
 ('S', 'month-end-t', 'ops', '0 0 12 L * ?', 'UTC'),
 ('S', 'tokyo-t', 'ops', '0 0/5 14,18 * * ?', NULL);
INSERT INTO qrtz_simple_triggers VALUES
 ('S', 'pull-t', 'sync', -1, 60000, 12),
 ('S', 'once-t', 'ops', 0, 0, 0);
