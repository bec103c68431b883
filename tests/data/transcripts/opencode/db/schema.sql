-- The tables of OpenCode's SQLite database (opencode.db) that hold its sessions, as OpenCode
-- creates them: written for these tests from OpenCode's Drizzle table definitions
-- (packages/opencode/src/session/session.sql.ts, project/project.sql.ts,
-- storage/schema.sql.ts) and its JSON-to-SQLite move (storage/json-migration.ts) in
-- https://github.com/anomalyco/opencode (formerly sst/opencode), MIT licensed. Not copied:
-- the columns, types and constraints are restated in SQL here.
--
-- Part 1 is the first schema (OpenCode 1.2, which moved the storage files into the
-- database); part 2 the columns later releases added to `session` (message and part kept
-- their columns) and the `session_message` table of the current source
-- (src/session/session.sql.ts), which OpenCode's newer message model fills (from a
-- session's message and part rows, or instead of them). The tests build a database of each.

-- part 1: the first schema
CREATE TABLE `project` (
    `id` text PRIMARY KEY NOT NULL,
    `worktree` text NOT NULL,
    `vcs` text,
    `name` text,
    `icon_url` text,
    `icon_color` text,
    `time_created` integer NOT NULL,
    `time_updated` integer NOT NULL,
    `time_initialized` integer,
    `sandboxes` text NOT NULL
);
CREATE TABLE `session` (
    `id` text PRIMARY KEY NOT NULL,
    `project_id` text NOT NULL REFERENCES `project`(`id`) ON DELETE cascade,
    `parent_id` text,
    `slug` text NOT NULL,
    `directory` text NOT NULL,
    `title` text NOT NULL,
    `version` text NOT NULL,
    `share_url` text,
    `summary_additions` integer,
    `summary_deletions` integer,
    `summary_files` integer,
    `summary_diffs` text,
    `revert` text,
    `permission` text,
    `time_created` integer NOT NULL,
    `time_updated` integer NOT NULL,
    `time_compacting` integer,
    `time_archived` integer
);
CREATE INDEX `session_project_idx` ON `session` (`project_id`);
CREATE INDEX `session_parent_idx` ON `session` (`parent_id`);
CREATE TABLE `message` (
    `id` text PRIMARY KEY NOT NULL,
    `session_id` text NOT NULL REFERENCES `session`(`id`) ON DELETE cascade,
    `time_created` integer NOT NULL,
    `time_updated` integer NOT NULL,
    `data` text NOT NULL
);
CREATE INDEX `message_session_time_created_id_idx` ON `message` (`session_id`, `time_created`, `id`);
CREATE TABLE `part` (
    `id` text PRIMARY KEY NOT NULL,
    `message_id` text NOT NULL REFERENCES `message`(`id`) ON DELETE cascade,
    `session_id` text NOT NULL,
    `time_created` integer NOT NULL,
    `time_updated` integer NOT NULL,
    `data` text NOT NULL
);
CREATE INDEX `part_message_id_id_idx` ON `part` (`message_id`, `id`);
CREATE INDEX `part_session_idx` ON `part` (`session_id`);
CREATE TABLE `todo` (
    `session_id` text NOT NULL REFERENCES `session`(`id`) ON DELETE cascade,
    `content` text NOT NULL,
    `status` text NOT NULL,
    `priority` text NOT NULL,
    `position` integer NOT NULL,
    `time_created` integer NOT NULL,
    `time_updated` integer NOT NULL,
    PRIMARY KEY (`session_id`, `position`)
);
CREATE TABLE `permission` (
    `project_id` text PRIMARY KEY NOT NULL REFERENCES `project`(`id`) ON DELETE cascade,
    `time_created` integer NOT NULL,
    `time_updated` integer NOT NULL,
    `data` text NOT NULL
);

-- part 2: columns added to session since
ALTER TABLE `session` ADD `workspace_id` text;
ALTER TABLE `session` ADD `path` text;
ALTER TABLE `session` ADD `agent` text;
ALTER TABLE `session` ADD `model` text;
ALTER TABLE `session` ADD `cost` real DEFAULT 0 NOT NULL;
ALTER TABLE `session` ADD `tokens_input` integer DEFAULT 0 NOT NULL;
ALTER TABLE `session` ADD `tokens_output` integer DEFAULT 0 NOT NULL;
ALTER TABLE `session` ADD `tokens_reasoning` integer DEFAULT 0 NOT NULL;
ALTER TABLE `session` ADD `tokens_cache_read` integer DEFAULT 0 NOT NULL;
ALTER TABLE `session` ADD `tokens_cache_write` integer DEFAULT 0 NOT NULL;
ALTER TABLE `session` ADD `goal` text;
CREATE INDEX `session_workspace_idx` ON `session` (`workspace_id`);
-- and the table of OpenCode's newer message model (one row per message, typed), which it
-- fills from the message and part rows of a session and, for new sessions, instead of them
CREATE TABLE `session_message` (
    `id` text PRIMARY KEY NOT NULL,
    `session_id` text NOT NULL REFERENCES `session`(`id`) ON DELETE cascade,
    `type` text NOT NULL,
    `time_created` integer NOT NULL,
    `time_updated` integer NOT NULL,
    `data` text NOT NULL
);
CREATE INDEX `session_message_session_idx` ON `session_message` (`session_id`);
