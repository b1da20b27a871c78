"""Draft sets: folders written by dspark's fabricator and by the trainers'
own released code, each returned as a list of `Case`s."""
