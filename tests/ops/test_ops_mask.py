import harness
harness.main(lambda ck: None)
