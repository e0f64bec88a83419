"""Start the drafter and target processes together, forward options, and stop both on exit."""
