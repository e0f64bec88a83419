"""The drafter process: keeps the committed context and grows a candidate pool each round."""
