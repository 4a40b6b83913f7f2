"""The datasets the loaders read: a generated ImageFolder tree of real photographs and its TFRecord
shards."""
