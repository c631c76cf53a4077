"""The trainer SDK: a few lines in a torch training script make it yield gracefully."""
