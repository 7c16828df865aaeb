"""The Search-R1 ``/retrieve`` server and client, and the HTTP guards both of our servers use."""
