-- Every part of a conversation's message as its owner reads it (JSON: text, data as JSON, files
-- as name, media type, size, digest and their content or URL within a bound); NULL for messages
-- kept before, whose text is all there is.
ALTER TABLE messages ADD COLUMN parts TEXT;
