"""What a decode produces and how it is read: the record schema, provenance, summaries, paired-bootstrap
statistics, the prompt sources, recorded rounds and every rule's value at them. No process, socket or device
runs here."""
