-- Jobs as an XXL-JOB admin's console saves them, one per form the
-- importer maps: Quartz cron forms, strategies, retries, chains, GLUE.
USE `xxl_job`;
INSERT INTO `xxl_job_group`(`id`, `app_name`, `name`, `address_type`) VALUES (3, 'billing', 'Billing', 0);
INSERT INTO `xxl_job_info`(`id`, `job_group`, `name`, `author`, `alarm_email`, `schedule_type`, `schedule_conf`,
    `misfire_strategy`, `executor_route_strategy`, `executor_handler`, `executor_param`, `executor_block_strategy`,
    `executor_timeout`, `executor_fail_retry_count`, `glue_type`, `glue_source`, `child_jobid`, `trigger_status`)
VALUES
 (10, 3, 'settle',       'ann', 'ann@example.com', 'CRON', '0 30 2 * * ?',             'FIRE_ONCE_NOW', 'ROUND',              'settleHandler',  'region=eu', 'SERIAL_EXECUTION', 600, 2, 'BEAN', '', '11,12', 1),
 (11, 3, 'invoice',      'ann', '',                'NONE', '',                          'DO_NOTHING',    'CONSISTENT_HASH',    'invoiceHandler', '',          'DISCARD_LATER',    0,   0, 'BEAN', '', '',      1),
 (12, 3, 'ledger',       'bob', '',                'CRON', '0 0/15 9-17 ? * MON-FRI',   'DO_NOTHING',    'SHARDING_BROADCAST', 'ledgerHandler',  '',          'COVER_EARLY',      60,  0, 'BEAN', '', '',      1),
 (13, 3, 'sundays',      'bob', '',                'CRON', '15 10 8 ? * 1,7',           'DO_NOTHING',    'FAILOVER',           'weekendHandler', '',          'SERIAL_EXECUTION', 30,  0, 'BEAN', '', '',      0),
 (14, 3, 'quarterly',    'bob', '',                'CRON', '0 0 6 1 JAN,APR,JUL,OCT ? *', 'DO_NOTHING',  'LAST',               'quarterHandler', '',          'SERIAL_EXECUTION', 30,  0, 'BEAN', '', '',      1),
 (15, 3, 'steps',        'bob', '',                'CRON', '5/20 */7 1-23/4 1,15 * ?',  'DO_NOTHING',    'BUSYOVER',           'stepHandler',    '',          'SERIAL_EXECUTION', 30,  0, 'BEAN', '', '',      1),
 (16, 3, 'night-wrap',   'bob', '',                'CRON', '0 0 22-2 ? * *',            'DO_NOTHING',    'RANDOM',             'wrapHandler',    '',          'SERIAL_EXECUTION', 30,  0, 'BEAN', '', '',      1),
 (17, 3, 'month-end',    'bob', '',                'CRON', '0 0 23 L * ?',              'DO_NOTHING',    'FIRST',              'endHandler',     '',          'SERIAL_EXECUTION', 30,  0, 'BEAN', '', '',      1),
 (18, 3, 'nth-friday',   'bob', '',                'CRON', '0 0 12 ? * 6#3',            'DO_NOTHING',    'FIRST',              'nthHandler',     '',          'SERIAL_EXECUTION', 30,  0, 'BEAN', '', '',      1),
 (19, 3, 'weekday-near', 'bob', '',                'CRON', '0 0 12 15W * ?',            'DO_NOTHING',    'FIRST',              'nearHandler',    '',          'SERIAL_EXECUTION', 30,  0, 'BEAN', '', '',      1),
 (20, 3, 'one-year',     'bob', '',                'CRON', '0 0 12 * * ? 2027',         'DO_NOTHING',    'FIRST',              'yearHandler',    '',          'SERIAL_EXECUTION', 30,  0, 'BEAN', '', '',      1),
 (21, 3, 'both-days',    'bob', '',                'CRON', '0 0 12 1 * MON',            'DO_NOTHING',    'FIRST',              'bothHandler',    '',          'SERIAL_EXECUTION', 30,  0, 'BEAN', '', '',      1),
 (22, 3, 'rate',         'bob', '',                'FIX_RATE', '90',                    'DO_NOTHING',    'LEAST_FREQUENTLY_USED', 'rateHandler', '',          'SERIAL_EXECUTION', 30,  0, 'BEAN', '', '',      1),
 (23, 3, 'groovy',       'bob', '',                'CRON', '0 0 1 * * ?',               'DO_NOTHING',    'FIRST',              '',               '',          'SERIAL_EXECUTION', 30,  0, 'GLUE_GROOVY', 'class X {}', '', 1),
 (24, 3, 'shell-glue',   'bob', '',                'CRON', '0 0 1 * * ?',               'DO_NOTHING',    'FIRST',              '',               '',          'SERIAL_EXECUTION', 30,  0, 'GLUE_SHELL', 'echo hi', '', 1);
