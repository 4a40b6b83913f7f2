"""The TensorFlow runtime: Keras models, tf.data loaders and the rank-side set-up of TensorFlow."""
