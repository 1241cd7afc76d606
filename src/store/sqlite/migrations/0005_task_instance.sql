-- Which running instance is answering a working task, so a start-up sweep fails only the
-- leftovers of instances that are gone. NULL for tasks stored before instances were recorded.
ALTER TABLE tasks ADD COLUMN instance TEXT;
