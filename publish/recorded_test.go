package publish
