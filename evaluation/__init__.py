"""What a decode produces and how it is read: recorded rounds and the values of every rule at them."""
