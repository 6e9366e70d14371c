package tundev_test

import "syscall"

var syscallECONNREFUSED error = syscall.ECONNREFUSED
