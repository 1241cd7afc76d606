-- The sweep that fails tasks left working by a stopped process reads only the tasks still
-- working: without this index it scanned the whole table (seconds a minute once a day's tasks
-- were held). Partial, so it holds only the tasks in flight. PostgreSQL's schema has had it
-- from its first migration.
CREATE INDEX tasks_working ON tasks(state) WHERE state = 'TASK_STATE_WORKING';
