-- XXL-JOB's published schema (doc/db/tables_xxl_job.sql of xuxueli/xxl-job,
-- commit 128dd678, June 2026): the tables the importer and the shadow
-- report read, with their sample rows (the BEAN sample job and its
-- executor group, and the AI sample job that has no schedule), as
-- XXL-JOB ships them; column comments left out.

CREATE DATABASE IF NOT EXISTS `xxl_job` DEFAULT CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci;
USE `xxl_job`;

CREATE TABLE `xxl_job_group`
(
    `id`                    INT                 NOT NULL AUTO_INCREMENT,
    `app_name`              VARCHAR(64)         NOT NULL,
    `name`                  VARCHAR(64)         NOT NULL,
    `address_type`          TINYINT             NOT NULL DEFAULT 0,
    `address_list`          TEXT                DEFAULT NULL,
    `access_token`          VARCHAR(255)        DEFAULT NULL,
    `update_time`           DATETIME            DEFAULT NULL,
    PRIMARY KEY (`id`),
    UNIQUE KEY `i_app_name` (`app_name`) USING BTREE
) ENGINE = InnoDB
  DEFAULT CHARSET = utf8mb4;

CREATE TABLE `xxl_job_info`
(
    `id`                        INT                 NOT NULL AUTO_INCREMENT,
    `job_group`                 INT                 NOT NULL,
    `name`                      VARCHAR(255)        NOT NULL,
    `author`                    VARCHAR(64)         DEFAULT NULL,
    `alarm_email`               VARCHAR(255)        DEFAULT NULL,
    `schedule_type`             VARCHAR(50)         NOT NULL DEFAULT 'NONE',
    `schedule_conf`             VARCHAR(128)        DEFAULT NULL,
    `misfire_strategy`          VARCHAR(50)         NOT NULL DEFAULT 'DO_NOTHING',
    `executor_route_strategy`   VARCHAR(50)         DEFAULT NULL,
    `executor_handler`          VARCHAR(255)        DEFAULT NULL,
    `executor_param`            TEXT                DEFAULT NULL,
    `executor_block_strategy`   VARCHAR(50)         DEFAULT NULL,
    `executor_timeout`          INT                 NOT NULL DEFAULT 0,
    `executor_fail_retry_count` INT                 NOT NULL DEFAULT 0,
    `glue_type`                 VARCHAR(50)         NOT NULL,
    `glue_source`               MEDIUMTEXT          DEFAULT NULL,
    `glue_remark`               VARCHAR(128)        DEFAULT NULL,
    `glue_updatetime`           DATETIME            DEFAULT NULL,
    `child_jobid`               VARCHAR(255)        DEFAULT NULL,
    `trigger_status`            TINYINT             NOT NULL DEFAULT 0,
    `trigger_last_time`         BIGINT              NOT NULL DEFAULT 0,
    `trigger_next_time`         BIGINT              NOT NULL DEFAULT 0,
    `add_time`                  DATETIME            DEFAULT NULL,
    `update_time`               DATETIME            DEFAULT NULL,
    PRIMARY KEY (`id`)
) ENGINE = InnoDB
  DEFAULT CHARSET = utf8mb4;

CREATE TABLE `xxl_job_log`
(
    `id`                        BIGINT              NOT NULL AUTO_INCREMENT,
    `job_group`                 INT                 NOT NULL,
    `job_id`                    INT                 NOT NULL,
    `executor_address`          VARCHAR(255)        DEFAULT NULL,
    `executor_handler`          VARCHAR(255)        DEFAULT NULL,
    `executor_param`            TEXT                DEFAULT NULL,
    `executor_sharding_param`   VARCHAR(20)         DEFAULT NULL,
    `executor_fail_retry_count` INT                 NOT NULL DEFAULT 0,
    `trigger_time`              DATETIME            DEFAULT NULL,
    `trigger_code`              INT                 NOT NULL,
    `trigger_msg`               TEXT                DEFAULT NULL,
    `handle_time`               DATETIME            DEFAULT NULL,
    `handle_code`               INT                 NOT NULL,
    `handle_msg`                TEXT                DEFAULT NULL,
    `alarm_status`              TINYINT             NOT NULL DEFAULT 0,
    PRIMARY KEY (`id`),
    KEY `i_trigger_time` (`trigger_time`),
    KEY `i_handle_code` (`handle_code`),
    KEY `i_job_group` (`job_group`),
    KEY `i_job_id` (`job_id`)
) ENGINE = InnoDB
  DEFAULT CHARSET = utf8mb4;

START TRANSACTION;

INSERT INTO `xxl_job_group`(`id`, `app_name`, `name`, `address_type`, `address_list`, `access_token`, `update_time`)
    VALUES (1, 'xxl-job-executor-sample', '通用执行器Sample', 0,  NULL, 'default_token', now()),
           (2, 'xxl-job-executor-sample-ai', 'AI执行器Sample', 0, NULL, 'default_token', now());

INSERT INTO `xxl_job_info`(`id`, `job_group`, `name`, `add_time`, `update_time`, `author`, `alarm_email`,
                           `schedule_type`, `schedule_conf`, `misfire_strategy`, `executor_route_strategy`,
                           `executor_handler`, `executor_param`, `executor_block_strategy`, `executor_timeout`,
                           `executor_fail_retry_count`, `glue_type`, `glue_source`, `glue_remark`, `glue_updatetime`,
                           `child_jobid`)
VALUES (1, 1, '示例任务01', now(), now(), 'XXL', '', 'CRON', '0 0 0 * * ? *',
        'DO_NOTHING', 'FIRST', 'demoJobHandler', '', 'SERIAL_EXECUTION', 0, 0, 'BEAN', '', 'GLUE代码初始化',
        now(), ''),
       (2, 2, 'Ollama示例任务', now(), now(), 'XXL', '', 'NONE', '',
        'DO_NOTHING', 'FIRST', 'ollamaJobHandler', '{
    "input": "Java实现二叉树层序遍历",
    "prompt": "你是一个研发工程师，擅长解决技术类问题。",
    "model": "qwen3.5:0.8b"
}', 'SERIAL_EXECUTION', 0, 0, 'BEAN', '', 'GLUE代码初始化',
        now(), '');

commit;
