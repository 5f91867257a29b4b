"""Request and response models (`JobCreate`, `JobPublic`, `JobsPublic`, ...)."""
