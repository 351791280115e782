module github.com/meerkatd/meerkatd

go 1.26
