// placeholder: the reference backend lands in the next commit
