module example.com/fleet-tokend-client

go 1.21
