"""What a decode produces and how it is read: the record schema, provenance, summaries, paired-bootstrap
statistics and the prompt sources. No process, socket or device runs here."""
