module example.com/metadata-access-token

go 1.21
