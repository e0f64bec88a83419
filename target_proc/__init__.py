"""The target process: owns the target model and drives every round of a decode."""
